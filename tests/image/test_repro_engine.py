"""`invoke repro` and locked installs against the real engine: a Dockerfile that writes the date is caught and the
file named; a lock with a tampered hash stops the build with a clear message and tags nothing.

The PyTorch CI cell's own proof (two cold builds, one image ID) is a step of `invoke ci`
(dlimages/commands/ci_plan.py), not a test here: it takes one more full cold build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.core.runner import DEFAULT as RUNNER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BASE = "dlimages/base:debian12"
CI_CELL = "images/pytorch/cuda12.1-torch2.1.2-py3.11-runtime"
CI_REF = "lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime"


@pytest.fixture
def base() -> str:
    if os.environ.get("DLIMAGES_NO_DOCKER") == "1":
        pytest.skip("DLIMAGES_NO_DOCKER=1: no Docker engine on this host")
    if not RUNNER.image_exists(BASE):
        pytest.fail(f"{BASE} is missing: `invoke base` makes it (CI's builds make it first)", pytrace=False)
    return BASE


def invoke(root: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_repro_names_the_file_that_makes_a_dockerfile_unreproducible(base: str, tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        f"FROM {base}\n"
        "ARG SOURCE_DATE_EPOCH\n"
        "RUN echo reproducible > /same && touch --date=@${SOURCE_DATE_EPOCH} /same\n"
        "RUN date +%s%N > /built-at && touch --date=@${SOURCE_DATE_EPOCH} /built-at\n"
    )
    done = invoke(REPO, "repro", "--dockerfile", str(dockerfile), timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    report = out[out.index("DIFFERENT:") :]  # after the build logs, which echo each RUN line
    [line] = [line for line in report.splitlines() if "/built-at:" in line]
    assert "content" in line and "time" not in line, line  # the date is in the bytes; the file time is fixed
    assert "/same:" not in report, "a file written the same way twice must not be reported"
    assert "layer 2: RUN" in report and "date +%s%N > /built-at" in report, "the layer is named by its step"
    ids = re.findall(r"cold build \d: (sha256:[0-9a-f]{64})", out)
    assert len(set(ids)) == 2
    for image in ids:
        RUNNER.docker("image", "rm", "--force", image)


def test_a_tampered_hash_in_a_lock_stops_the_build_and_tags_nothing(base: str, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    cloned = RUNNER(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], timeout=120)
    assert cloned.ok, cloned.err
    pip_lock = clone / CI_CELL / "pip.lock"
    # Every hash of pip's files: pip accepts a file when any of the requirement's hashes matches.
    tampered, count = re.subn(r"--hash=sha256:[0-9a-f]{64}", "--hash=sha256:" + "0" * 64, pip_lock.read_text())
    assert count >= 1
    pip_lock.write_text(tampered)
    before = RUNNER.image_id(CI_REF)
    done = invoke(clone, "build", "--cuda", "12.1", "--torch", "2.1", "--python", "3.11", timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "DO NOT MATCH THE HASHES" in out
    assert "does not match the hash the cell's lock records" in out
    assert RUNNER.image_id(CI_REF) == before, "a failed build must leave the tag where it was"
