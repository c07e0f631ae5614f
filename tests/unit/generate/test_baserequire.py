"""`invoke bases --lock` reads each pinned nvidia/cuda base's own NVIDIA_REQUIRE_CUDA (skopeo inspect --config) and
names a matrix.yaml record that differs (generate/baserequire), on the fixture matrix with a stand-in skopeo. The real
skopeo against a real registry: tests/image/test_baselock_registry.py."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from dlimages.artifacts.baseslock import BaseLock
from dlimages.core.runner import Runner
from dlimages.generate import baserequire
from dlimages.model.cells import Expansion
from dlimages.model.spec import Matrix

DIGEST = "sha256:" + "a" * 64


def _skopeo(env: list[str] | None, *, code: int = 0) -> Runner:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert argv[argv.index("inspect") + 1] == "--config" and argv[-1].endswith(f"@{DIGEST}")
        config = {"architecture": "amd64", "config": {"Env": env} if env is not None else {}}
        return subprocess.CompletedProcess(argv, code, json.dumps(config) if code == 0 else "", "manifest unknown")

    return Runner(run=run)


def _pinned(expansion: Expansion) -> tuple[list[str], BaseLock]:
    bases = sorted({c.base_image for c in expansion.cells if c.cuda_source == "base"})
    assert bases, "the fixture matrix has cells on nvidia/cuda bases"
    return bases, BaseLock(dict.fromkeys(bases, DIGEST))


def test_a_base_that_sets_the_recorded_value_passes(matrix: Matrix, expansion: Expansion) -> None:
    bases, lock = _pinned(expansion)
    cells = [c for c in expansion.cells if c.base_image == bases[0]]
    recorded = matrix.nvidia_cuda.toolkits[cells[0].cuda].require_cuda
    assert recorded is not None
    # matrix.yaml folds the long value over lines; the base has it on one, as the toolkit reads it.
    env = ["PATH=/usr/bin", f"{baserequire.VARIABLE}={' '.join(recorded.split())}"]
    assert baserequire.stale_records(matrix, cells, lock, _skopeo(env)) == []


def test_a_base_with_other_clauses_is_named_with_both_values(matrix: Matrix, expansion: Expansion) -> None:
    bases, lock = _pinned(expansion)
    cells = [c for c in expansion.cells if c.base_image == bases[0]]
    [line] = baserequire.stale_records(matrix, cells, lock, _skopeo([f"{baserequire.VARIABLE}=cuda>=99.0"]))
    assert line.startswith(f"STALE matrix.yaml nvidia_cuda.toolkits.{cells[0].cuda}.require_cuda is 'cuda>=")
    assert f"but {bases[0]}@{DIGEST} sets NVIDIA_REQUIRE_CUDA='cuda>=99.0'" in line


def test_a_base_without_the_variable_or_an_unreadable_config_is_said(matrix: Matrix, expansion: Expansion) -> None:
    bases, lock = _pinned(expansion)
    cells = [c for c in expansion.cells if c.base_image == bases[0]]
    [line] = baserequire.stale_records(matrix, cells, lock, _skopeo(["PATH=/usr/bin"]))
    assert "sets NVIDIA_REQUIRE_CUDA=None" in line
    [line] = baserequire.stale_records(matrix, cells, lock, _skopeo(None, code=1))
    assert line.startswith("UNCHECKED ") and "skopeo could not read its config: manifest unknown" in line


def test_each_pinned_base_is_read_once_and_unpinned_or_wheel_cells_never(matrix: Matrix, expansion: Expansion) -> None:
    bases, _ = _pinned(expansion)
    calls: list[str] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv[-1])
        return subprocess.CompletedProcess(argv, 1, "", "no")

    lines = baserequire.stale_records(matrix, expansion.cells, BaseLock({bases[0]: DIGEST}), Runner(run=run))
    # By digest alone: skopeo refuses `name:tag@digest`.
    assert calls == [f"docker://{bases[0].rsplit(':', 1)[0]}@{DIGEST}"] and len(lines) == 1
    assert baserequire.stale_records(matrix, expansion.cells, BaseLock({}), Runner(run=run)) == []
    assert len(calls) == 1
