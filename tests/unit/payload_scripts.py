"""What the payload tests share: where dl-smoke, dl-bench and dl_stack.py live, and ways to run a script as a plain
file without a GPU, from the source tree or installed as an image installs it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

PAYLOAD = Path(__file__).resolve().parents[2] / "src" / "dlimages" / "payload"
SMOKE = PAYLOAD / "dl_smoke.py"
BENCH = PAYLOAD / "dl_bench.py"
STACK = PAYLOAD / "dl_stack.py"

# The scripts' skip paths (exit 77) run through torch; without it they exit 2.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (pip install torch)")


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a payload script as a plain file, with the same Python, every GPU hidden: the skip path on every host."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def run_main(
    module: ModuleType, args: Sequence[str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> subprocess.CompletedProcess[str]:
    """A script's main(args) in this process, every GPU hidden: what running it as a file does, without starting
    Python and importing torch again (the tests that run the file itself are the image-layout ones)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = module.main(list(args))
    captured = capfd.readouterr()
    return subprocess.CompletedProcess([module.__name__, *args], code, captured.out, captured.err)


def install_like_an_image(script: Path, command: str, folder: Path) -> Path:
    """Copy `script` into `folder` as `command` with dl_stack.py beside it, as images lay out /usr/local/bin."""
    installed = folder / command
    shutil.copy2(script, installed)
    shutil.copy2(STACK, folder / STACK.name)
    return installed
