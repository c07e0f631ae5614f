"""`pip check` as a build gate, against the real engine: a cell whose lock holds a set that does not fit together (every
file real and hash-checked) fails its build with the conflict named in pip's words and the way out, and tags nothing.

Runs in a git clone of this repo, where the PyTorch CI cell's lock gets an older pytz than pandas 2.2.3 allows
(pytz>=2020.1). The wheel and its hash come from the index at test time; nothing is written into this checkout. The
layers before the package set are those CI built for the cell, so the build takes a minute or two.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.core.runner import DEFAULT as RUNNER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BASE = "dlimages/base:debian13"
CI_CELL = "images/pytorch/cuda13.2-torch2.15.0-py3.13-runtime"
CI_REF = "lab/pytorch-universal-dev:v1.0-cuda13.2-torch2.15.0-py3.13-runtime"
CI_FLAGS = ("--cuda", "13.2", "--torch", "2.15", "--python", "3.13")
# pandas 2.2.3 requires pytz>=2020.1; 2019.3 is a real release, a py2.py3 wheel with no requirements of its own, so
# pip check finds this one conflict and nothing else.
OLD_PYTZ = "2019.3"
CONFLICT = f"pandas 2.2.3 has requirement pytz>=2020.1, but you have pytz {OLD_PYTZ}."


@pytest.fixture
def base() -> str:
    if os.environ.get("DLIMAGES_NO_DOCKER") == "1":
        pytest.skip("DLIMAGES_NO_DOCKER=1: no Docker engine on this host")
    if os.environ.get("DLIMAGES_NO_NETWORK") == "1":
        pytest.skip("DLIMAGES_NO_NETWORK=1: the old pytz wheel comes from the package index")
    if not RUNNER.image_exists(BASE):
        pytest.fail(f"{BASE} is missing: `invoke base` makes it (CI's builds make it first)", pytrace=False)
    return BASE


def old_pytz_pin(folder: Path) -> str:
    """The lock entry for the old pytz: the wheel fetched from the index (as pip would), pinned by its real hash."""
    download = ["pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(folder), f"pytz=={OLD_PYTZ}"]
    fetched = subprocess.run(
        [sys.executable, "-m", *download],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    [wheel] = folder.glob("pytz-*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"pytz=={OLD_PYTZ} \\\n    --hash=sha256:{digest}\n    # via pandas\n"


def test_a_lock_whose_pins_conflict_fails_the_build_naming_the_conflict(base: str, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    cloned = RUNNER(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], timeout=120)
    assert cloned.ok, cloned.err
    lock = clone / CI_CELL / "requirements.lock"
    text, count = re.subn(r"^pytz==\S+ \\\n(?:    .*\n)+", old_pytz_pin(tmp_path), lock.read_text(), flags=re.MULTILINE)
    assert count == 1, "the CI cell's lock has no pytz entry to replace"
    lock.write_text(text)
    before = RUNNER.image_id(CI_REF)
    # The clone's own package with its matrix, templates and locks: one commit, whatever this checkout holds.
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(clone), "build", *CI_FLAGS],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env=env,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert CONFLICT in out, out[-3000:]
    # The advice under the summary table (wrapped to the terminal): what failed, in pip's words, and what to run.
    advice = " ".join(out[out.rindex("pip check: pandas needs pytz>=2020.1") :].split())
    assert f"do not fit together (`pip check`), so nothing was tagged: {CONFLICT}" in advice
    assert "re-lock it, which resolves the framework and the package set together: `invoke lock --cuda 13.2 " in advice
    assert RUNNER.image_id(CI_REF) == before, "a failed build must leave the tag where it was"
