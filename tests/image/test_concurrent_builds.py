"""Two `invoke build --jobs 2` at once, from two clones of this repository on one engine, as two people on one
build host would run them; one is made to fail late. Each must tag and record only its own image: the failing run
reports its cell failed and records nothing built, the other tags the image it built (issue 17 item 3: both used
to share $TMPDIR/dlimages/, and the failing run read the other's bake metadata, called its cell built and recorded
the other's image, which a push would then have published).

Needs the engine and the base image; the cell's layers come from the cache when CI built it before.
Without an engine these tests fail; DLIMAGES_NO_DOCKER=1 turns that into a skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import require_engine

from dlimages.commands.ci_plan import BUILDS, PYTORCH_IMAGE
from dlimages.core.runner import DEFAULT as RUNNER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CELL = PYTORCH_IMAGE.split(":v1.0-")[1]  # cuda12.1-torch2.1.2-py3.11-runtime
FAIL_AFTER_S = 30  # the failing build's last step: long enough for the other build to finish meanwhile


def clone_of_repo(into: Path) -> Path:
    """A clone of this repository's commit: the same SOURCE_DATE_EPOCH and revision, so CI's cache serves it."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(into)], check=True)
    return into


def start_build(root: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "invoke", "--search-root", str(root), "build", "--jobs", "2", *BUILDS[0].split()]
    return subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ledger(root: Path) -> dict[str, object]:
    path = root / ".work/builds.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def test_two_concurrent_builds_each_tag_and_record_only_their_own_image(tmp_path: Path) -> None:
    require_engine()
    if not RUNNER.image_exists(PYTORCH_IMAGE):
        pytest.fail(f"{PYTORCH_IMAGE} is not built: run `invoke build {BUILDS[0]}` first", pytrace=False)
    good, bad = clone_of_repo(tmp_path / "good"), clone_of_repo(tmp_path / "bad")
    dockerfile = bad / "images/pytorch" / CELL / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"RUN sleep {FAIL_AFTER_S} && exit 3\n")
    failing = start_build(bad)
    time.sleep(5)
    passing = start_build(good)
    good_out, _ = passing.communicate(timeout=1800)
    bad_out, _ = failing.communicate(timeout=1800)
    assert passing.returncode == 0, good_out[-3000:]
    assert failing.returncode == 1, bad_out[-3000:]
    assert "Traceback" not in good_out + bad_out
    # The passing run built and recorded its cell; the failing one reported its cell failed and recorded no image.
    good_entry = json.dumps(ledger(good))
    assert CELL in good_entry and RUNNER.image_id(PYTORCH_IMAGE) in good_entry
    bad_entries = ledger(bad)
    assert RUNNER.image_id(PYTORCH_IMAGE) not in json.dumps(bad_entries)
    assert "FAILED" in bad_out or "failed" in bad_out.lower()
