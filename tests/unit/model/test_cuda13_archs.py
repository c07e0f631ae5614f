"""CUDA 13 and old GPUs: a build whose wheels carry no code for a GPU does not run there, and the verdict names why
and its source. Judged through the cells' own arch lists (`arch_sass`, `arch_ptx`), on a cell built here.

Sources, by the key in brackets:
[drop]    CUDA 13.0 release notes, 2.6.2 Deprecated Architectures (through the copy in docs/notes/research-cuda-
          drivers.md): "Offline compilation and library support for these architectures [Maxwell, Pascal, Volta]
          have been removed in CUDA Toolkit 13.0"; https://docs.nvidia.com/cuda/cuda-features-archive/index.html:
          "CUDA 13.0 supports all NVIDIA architectures from Turing through Grace Blackwell"
[matrix]  https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html: Volta,
          Pascal, Maxwell "Last CUDA Toolkit Support CUDA 12.x"; Kepler 3.5 3.7 "CUDA 11.x"
[issue]   issue 33's table: torch 2.11.0-2.14.1 on PyPI default to CUDA 13.0, with Blackwell and without sm_70
[drivers] CUDA 13.0.2's toolkit driver >= 580.95.05 (Table 3); minor-version compatibility for 13.x from R580 (">= 580",
          https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html), its first release
          580.65.06 (model/branches)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from dlimages.model import architectures, compat
from dlimages.model.cells import Cell
from dlimages.model.compat import DriverRule
from dlimages.model.doctor import kernels_for, report, verdict
from dlimages.model.gpunode import Gpu, Node

SASS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")  # [issue]: Turing to Blackwell, no sm_70


@pytest.fixture(scope="module")
def cuda13(cell: Callable[[str, str], Cell]) -> Cell:
    """A PyTorch build on CUDA 13.0 from its wheels, as the matrix's new cells are [issue][drivers]."""
    base = cell("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")
    require = compat.wheel_require_cuda("13.0", "580.95.05", "580.65.06", None)
    rule = DriverRule("13.0", "580.95.05", "580.65.06", None, None, require)
    return dataclasses.replace(base, cuda="13.0", cuda_toolkit="13.0.2", arch_sass=SASS, arch_ptx=(), driver=rule)


@pytest.mark.parametrize(
    ("gpu", "arch", "family"),
    [
        ("V100", "sm_70", "Volta"),
        ("P100", "sm_60", "Pascal"),
        ("GTX 1080", "sm_61", "Pascal"),
        ("M40", "sm_52", "Maxwell"),
    ],
)
def test_a_cuda_13_build_does_not_run_on_a_gpu_cuda_13_dropped(cuda13: Cell, gpu: str, arch: str, family: str) -> None:
    assert kernels_for(cuda13, arch) is None
    node = Node("580.65.06", (Gpu(gpu, arch, "nvidia"),), True, "given")  # R580: their last branch [matrix]
    [row] = report([cuda13], node)
    assert row["runs"] is False and row["condition"] == "no-kernels" and row["needs_driver"] is None
    reasons, sources = row["reasons"], row["sources"]
    assert isinstance(reasons, list) and isinstance(sources, list)
    [reason] = reasons
    assert reason.startswith(f"no kernels for {arch} ({gpu}) in this build: it has sm_75, sm_80")
    assert "CUDA 13.0 removed offline compilation and library support for Maxwell, Pascal and Volta" in reason
    assert f"{family} (" in reason
    assert {architectures.CUDA_13_ARCHS, architectures.MATRIX} <= set(sources)


@pytest.mark.parametrize(
    ("gpu", "driver", "through", "needs"),
    [
        (Gpu("T4", "sm_75", "nvidia"), "580.65.06", compat.TOOLKIT_DRIVER, None),  # Turing stays [drop]
        (Gpu("B200", "sm_100", "nvidia"), "580.95.05", compat.TOOLKIT_DRIVER, None),
        (Gpu("H100", "sm_90", "nvidia"), "550.54.15", None, "580.65.06"),  # 13.x needs R580 [drivers]
    ],
)
def test_newer_gpus_run_it_from_r580(
    cuda13: Cell, gpu: Gpu, driver: str, through: str | None, needs: str | None
) -> None:
    judged = verdict(cuda13, Node(driver, (gpu,), True, "given"))
    assert (judged.runs_through, judged.needs_driver) == (through, needs)
    assert not any("CUDA 13.0 removed" in reason for reason in judged.reasons)


def test_the_drop_is_cuda_13s_not_the_gpus(cell: Callable[[str, str], Cell]) -> None:
    """The same V100 runs a CUDA 12.1 build, whose wheels carry sm_70 [matrix]: CUDA 12.x."""
    cu121 = cell("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")
    assert verdict(cu121, Node("580.65.06", (Gpu("V100", "sm_70", "nvidia"),), True, "given")).runs


@pytest.mark.parametrize(
    ("arch", "cuda", "says"),
    [
        ("sm_70", "13.0", "CUDA 13.0 removed offline compilation and library support for Maxwell, Pascal and Volta"),
        ("sm_53", "13.2", "CUDA 13.0 removed"),
        ("sm_70", "12.9", None),
        ("sm_75", "13.0", None),
        ("sm_37", "12.1", "Kepler (sm_35, sm_37) GPUs were last supported by CUDA 11.x"),  # [matrix]
        ("sm_121", "13.0", None),
    ],
)
def test_which_cuda_majors_drop_which_gpus(arch: str, cuda: str, says: str | None) -> None:
    dropped = architectures.dropped_by(arch, cuda)
    assert (dropped is None) if says is None else (dropped is not None and says in dropped)
