"""Proof that a lock works: its files installed on the cell's own Python with the image's flags (hashes, no
dependency resolution, wheels but the named sources) in a fresh venv, then the framework imported and made to compute
on the CPU. `pip check` cannot see an upper bound a package forgot to declare (TensorFlow 2.4 and protobuf 4); this
does, for every locked cell, without its base image or a GPU.

The installer is uv (`uv pip install`, the project's own pinned tool) with the flags the Dockerfile gives pip: the
same files, the same hash checks; uv's cache lets a second proof of a 5 GB lock take seconds instead of minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts.layout import cell_dir
from dlimages.artifacts.pythonlock import FRAMEWORK_LOCK, LOCK, PIP_LOCK, install_flags
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell

INSTALL_TIMEOUT_S = 1800.0  # a cold cache downloads a CUDA framework's 3-5 GB of wheels
PROBE_TIMEOUT_S = 300.0
# Run in the cell's venv: import the framework, check its version, multiply two small matrices on the CPU.
PROBE = """\
import json, sys
framework, want = sys.argv[1], sys.argv[2]
if framework == "pytorch":
    import torch
    module, x = torch, torch.ones((2, 2))
    value = float((x @ x).sum())
else:
    import tensorflow as tf
    module = tf
    value = float(tf.reduce_sum(tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))).numpy())
print(json.dumps({"version": module.__version__, "value": value}))
"""
PROBE_VALUE = 8.0  # the sum of [[1, 1], [1, 1]] squared
QUIET = {"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


@dataclass(frozen=True)
class Proof:
    cell: Cell
    ok: bool
    said: str  # the framework's version and result, or what went wrong (the last lines of the output)
    seconds: float = 0.0


def cell_python(version: str, environ: Mapping[str, str] = os.environ) -> Path | None:
    """An interpreter of Python `version` (3.8, ...): pyenv's newest patch release of it, else `pythonX.Y` on PATH."""
    root = Path(environ.get("PYENV_ROOT") or Path(environ.get("HOME", "/")) / ".pyenv") / "versions"
    found = sorted(root.glob(f"{version}.*/bin/python{version}"), key=lambda p: [int(x) for x in _patch(p)])
    if found:
        return found[-1]
    for folder in environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / f"python{version}"
        if folder and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _patch(path: Path) -> list[str]:
    return [part for part in path.parents[1].name.split(".") if part.isdigit()]


def install_argvs(root: Path, cell: Cell, venv: Path, cache: Path | None = None) -> list[list[str]]:
    """The lock's three files in the order the Dockerfile installs them, each with its flags, into `venv`; `cache`:
    uv's cache folder (default: the user's)."""
    flags = install_flags(cell.install.source_builds).split()
    folder = cell_dir(root, cell)
    uv = ["uv", "pip", "install", "--python", str(venv / "bin/python"), "--no-config", "--native-tls", *flags]
    uv += ["--cache-dir", str(cache)] if cache is not None else []
    return [[*uv, "--link-mode", "hardlink", "-r", str(folder / name)] for name in (PIP_LOCK, FRAMEWORK_LOCK, LOCK)]


def judge(cell: Cell, output: str) -> tuple[bool, str]:
    """Whether the probe's last line shows the cell's framework version computing the right value."""
    lines = [line for line in output.splitlines() if line.strip()]
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return False, _tail(output)
    version, value = str(found.get("version")), found.get("value")
    if version.split("+")[0] != cell.framework_version:
        return False, f"imported {cell.framework} {version}, not {cell.framework_version}"
    if value != PROBE_VALUE:
        return False, f"{cell.framework} {version} computed {value!r}, not {PROBE_VALUE}"
    return True, f"{cell.framework} {version} imports and computes on the CPU"


def _tail(output: str, lines: int = 6) -> str:
    kept = [line for line in output.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"


def prove(root: Path, cell: Cell, runner: Runner, workdir: Path, cache: Path | None = None) -> Proof:
    """Install `cell`'s lock into a fresh venv under `workdir` on the cell's Python and run the probe; `cache`: uv's
    cache folder (default: the user's, which makes a second proof take seconds; about twice the lock's size)."""
    start = time.monotonic()
    python = cell_python(cell.python)
    if python is None:
        return Proof(cell, False, f"no Python {cell.python} here (pyenv install {cell.python})")
    venv = workdir / cell.slug
    made = runner([str(python), "-m", "venv", "--without-pip", str(venv)], timeout=120)
    if not made.ok:
        return Proof(cell, False, f"venv on {python}: {_tail(made.out + made.err)}", time.monotonic() - start)
    for argv in install_argvs(root, cell, venv, cache):
        done = runner(argv, timeout=INSTALL_TIMEOUT_S)
        if not done.ok:
            return Proof(cell, False, f"{argv[-1]}: {_tail(done.out + done.err)}", time.monotonic() - start)
    probe = [str(venv / "bin/python"), "-c", PROBE, cell.framework, cell.framework_version]
    done = runner(probe, timeout=PROBE_TIMEOUT_S, env={**os.environ, **QUIET})
    ok, said = judge(cell, done.out) if done.ok else (False, _tail(done.out + done.err))
    return Proof(cell, ok, said, time.monotonic() - start)


def prove_cells(
    root: Path, cells: Sequence[Cell], runner: Runner, workdir: Path, say: Callable[[str], None] = print
) -> list[Proof]:
    """Prove each cell whose lock is one of its own (devel and runtime of one release share a lock: proved once)."""
    proofs: list[Proof] = []
    seen: dict[str, Proof] = {}
    for cell in cells:
        text = (cell_dir(root, cell) / LOCK).read_text(encoding="utf-8")
        key = "\n".join(line for line in text.splitlines() if not line.startswith("#"))  # the header names the cell
        if key in seen:
            first = seen[key]
            proofs.append(Proof(cell, first.ok, f"the lock of {first.cell.slug}: {first.said}"))
        else:
            proof = prove(root, cell, runner, workdir)
            seen[key] = proof
            proofs.append(proof)
            say(f"{'proved' if proof.ok else 'FAILED'} {cell.slug} ({proof.seconds:.0f} s): {proof.said}")
        shutil.rmtree(workdir / cell.slug, ignore_errors=True)  # 5 GB each: one venv at a time
    return proofs
