"""The command lines people type, in one place: task help, advice and error messages read them here, so a renamed
task or flag is one edit. Imports nothing of the package, so any module may read it."""

from __future__ import annotations

from pathlib import Path

PROGRAM = "invoke"  # `dlimages` runs the same tasks (dlimages.cli); messages name the command the README teaches


def invoke(*words: str) -> str:
    """A command line as typed: invoke("build", "--cuda 11.8") is "invoke build --cuda 11.8"."""
    return " ".join((PROGRAM, *words))


ENGINE_SCRIPT = Path("scripts/engine.sh")  # relative to the repository root: installs and starts the engine
MATRIX = invoke("matrix")
MATRIX_EXPLAIN = invoke("matrix", "--explain")
MATRIX_JSON = invoke("matrix", "--json")
RENDER_CHECK = invoke("render", "--check")
BUILD = invoke("build")
BAKE = invoke("bake")
REPRO = invoke("repro")
LOCK = invoke("lock")
LOCK_CHECK = invoke("lock", "--check")
BASE = invoke("base")
BASE_AS_ROOT = f'sudo "$(command -v {PROGRAM})" base'  # root's PATH may lack the virtual environment's invoke
BASES_LOCK = invoke("bases", "--lock")
APT_REPO = invoke("apt-repo")
APT_FROM_HELP = (
    "where the locked OS packages come from: archive (default: the build's apt mirror), a snapshot archive's URL with "
    f"{{archive}} and {{time}} in it (the lock's time), or a folder `{APT_REPO}` made, or its URL"
)
BASES_MIRROR = invoke("bases.mirror")
TEST = invoke("test")
INSTALL_TEST_TOOLS = "pip install -e '.[test]'"  # pyproject.toml's `test` extra, from the clone
PUSH = invoke("push")
VERIFY = invoke("verify")
DISK = invoke("disk")
CHECK = invoke("check")
CI = invoke("ci")
