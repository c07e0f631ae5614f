"""The doctor's verdicts on the kinds of node platform teams run (issue 19's list), one family of images a column.

Each expectation follows from these sources, cited by the key in brackets:
[toolkit]   CUDA release notes, table 3 (the driver each CUDA release ships with: 11.0 450.51.06, 11.8 520.61.05,
            12.1 530.30.02): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html#id5
[branch]    a driver reports the CUDA of its branch (R525: 12.0; nvidia-smi's "CUDA Version"), which is what the
            toolkit's `cuda>=` compares: https://docs.nvidia.com/deploy/cuda-compatibility/index.html
[minor]     minor-version compatibility: CUDA 11.x apps on >= 450.80.02, 12.x on >= 525.60.13, any GPU, no PTX JIT:
            https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
[forward]   forward compatibility (the base's cuda-compat) on data-center GPUs only:
            https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html
[req-11.0]  nvidia/cuda 11.0.3's NVIDIA_REQUIRE_CUDA `cuda>=11.0 brand=tesla,driver>=418,driver<419`:
            https://gitlab.com/nvidia/container-images/cuda/blob/master/dist/11.0.3/ubuntu2004/base/Dockerfile
[req-11.8]  nvidia/cuda 11.8.0's, since 684356f0: `cuda>=11.8` or R470 of any brand (no R450):
            https://gitlab.com/nvidia/container-images/cuda/-/blob/684356f0/dist/11.8.0/ubuntu2204/base/Dockerfile
[arch]      the builds' GPU code: PyTorch cu110 sm_37-sm_80, cu118 up to sm_90, cu121 sm_50-sm_90 (PyTorch's
            builder, torch.cuda.get_arch_list()); TensorFlow sm_35-sm_75 and compute_80 PTX (tf build_info); a cubin
            runs on GPUs of its major architecture from its minor on (CUDA's rule, dl_stack.entry_runs_on)
[tf-2.14]   TF 2.14.1's wheel: MLIR-generated kernels with sm_35-sm_75 cubins and compute_80 PTX of ISA 7.1 (CUDA
            11.1, driver 455.23.05), the others with sm_80 cubins too (docs/notes/research-tf-fatbins.md)
[brand]     GPU brands as NVML names them: data-center parts are tesla on R418-R450, nvidia from R470

A verdict is "toolkit", "minor" or "forward" (how it runs), "no >= X" (it does not; driver X would run it on this
GPU) or "no kernels" (no build of it ever runs on this GPU).
"""

from __future__ import annotations

import pytest

from dlimages.model import compat
from dlimages.model.cells import Cell, Expansion
from dlimages.model.doctor import verdict
from dlimages.model.gpunode import Gpu, Node

FAMILIES = {  # the fixture's cells, with the real matrix's driver facts (test_compat_drivers.py holds that)
    "torch-cu110": "cuda11.0-torch1.7.1-py3.8-runtime",
    "torch-cu118": "cuda11.8-torch2.1.2-py3.10-runtime",
    "torch-cu121": "cuda12.1-torch2.1.2-py3.10-runtime",
    "tf-2.4-base": "cuda11.0-tf2.4.4-py3.8-runtime",
    "tf-2.13-base": "cuda11.8-tf2.13.1-py3.10-runtime",
    "tf-2.14-wheels": "cuda11.8-tf2.14.1-py3.10-runtime",
}
NODES: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    # name, arch, brand, driver, verdicts in FAMILIES' order
    # R418: below every CUDA 11 [toolkit][minor]; only the 11.0 base admits Tesla R418 [req-11.0][forward].
    ("T4", "sm_75", "tesla", "418.87.01", ("no >= 450.51.06", "no >= 450.80.02", "no >= 525.60.13", "forward",
                                           "no >= 520.61.05", "no >= 450.80.02")),
    ("V100", "sm_70", "tesla", "418.87.01", ("no >= 450.51.06", "no >= 450.80.02", "no >= 525.60.13", "forward",
                                             "no >= 520.61.05", "no >= 450.80.02")),
    # A GeForce on R418: the 11.0 base admits Tesla only there [req-11.0].
    ("RTX 2080", "sm_75", "geforcertx", "418.87.01", ("no >= 450.51.06", "no >= 450.80.02", "no >= 525.60.13",
                                                      "no >= 450.51.06", "no >= 520.61.05", "no >= 450.80.02")),
    # R450: 450.80.02 is CUDA 11.0's driver and the 11.x minor-version floor [toolkit][minor]; 450.51.06 only the
    # former. The 11.8 base admits no R450 [req-11.8]. TF 2.14's wheels need JIT on sm_8x of ISA 7.1 PTX, which
    # drivers from CUDA 11.1's 455.23.05 compile [tf-2.14].
    ("A100", "sm_80", "tesla", "450.80.02", ("toolkit", "minor", "no >= 525.60.13", "toolkit", "no >= 520.61.05",
                                             "no >= 455.23.05")),
    ("P100", "sm_60", "tesla", "450.80.02", ("toolkit", "minor", "no >= 525.60.13", "toolkit", "no >= 520.61.05",
                                             "minor")),
    ("A100", "sm_80", "tesla", "450.51.06", ("toolkit", "no >= 450.80.02", "no >= 525.60.13", "toolkit",
                                             "no >= 520.61.05", "no >= 455.23.05")),
    ("P100", "sm_60", "tesla", "450.51.06", ("toolkit", "no >= 450.80.02", "no >= 525.60.13", "toolkit",
                                             "no >= 520.61.05", "no >= 450.80.02")),
    # R470: the 11.8 base's forward compatibility on data-center GPUs [req-11.8][forward]; a GeForce gets error 804.
    # TF 2.14's wheels run through minor-version compatibility with JIT of their ISA 7.1 PTX [tf-2.14].
    ("A100", "sm_80", "nvidia", "470.82.01", ("toolkit", "minor", "no >= 525.60.13", "toolkit", "forward", "minor")),
    ("A10", "sm_86", "nvidia", "470.82.01", ("toolkit", "minor", "no >= 525.60.13", "toolkit", "forward", "minor")),
    ("RTX 3090", "sm_86", "geforcertx", "470.82.01", ("toolkit", "minor", "no >= 525.60.13", "toolkit",
                                                      "no >= 520.61.05", "minor")),
    # R510, R515: no branch the 11.8 base admits [req-11.8]; cu121 still below its floor [minor].
    ("RTX 3090", "sm_86", "geforcertx", "510.47.03", ("toolkit", "minor", "no >= 525.60.13", "toolkit",
                                                      "no >= 520.61.05", "minor")),
    ("A100", "sm_80", "nvidia", "515.65.01", ("toolkit", "minor", "no >= 525.60.13", "toolkit", "no >= 520.61.05",
                                              "minor")),
    # R525 supports CUDA 12.0 [branch]: CUDA 11.8 itself, 12.1 through minor-version compatibility [minor].
    ("L4", "sm_89", "nvidia", "525.60.13", ("toolkit", "toolkit", "minor", "toolkit", "toolkit", "toolkit")),
    ("RTX 4090", "sm_89", "geforcertx", "525.60.13", ("toolkit", "toolkit", "minor", "toolkit", "toolkit",
                                                      "toolkit")),
    # Hopper: no CUDA 11.0 build has sm_90 code [arch]; TF's compute_80 PTX is JIT-compiled by these drivers.
    ("H100", "sm_90", "nvidia", "525.60.13", ("no kernels", "toolkit", "minor", "toolkit", "toolkit", "toolkit")),
    ("H100", "sm_90", "nvidia", "535.104.05", ("no kernels", "toolkit", "toolkit", "toolkit", "toolkit", "toolkit")),
    ("GTX 1080", "sm_61", "geforce", "550.54.15", ("toolkit",) * 6),
    ("H200", "sm_90", "nvidia", "580.65.06", ("no kernels", "toolkit", "toolkit", "toolkit", "toolkit", "toolkit")),
]  # fmt: skip
SHORT = {compat.TOOLKIT_DRIVER: "toolkit", compat.MINOR_VERSION: "minor", compat.FORWARD_COMPAT: "forward"}


@pytest.fixture(scope="module")
def family_cells(expansion: Expansion) -> dict[str, Cell]:
    by_slug = {c.slug: c for c in expansion.cells}
    return {family: by_slug[slug] for family, slug in FAMILIES.items()}


def _said(cell: Cell, node: Node) -> str:
    judged = verdict(cell, node)
    if judged.runs:
        return SHORT[judged.runs_through or compat.TOOLKIT_DRIVER]
    if any(reason.startswith("no kernels for") for reason in judged.reasons):
        return "no kernels"
    return f"no >= {judged.needs_driver}"


@pytest.mark.parametrize(("name", "arch", "brand", "driver", "verdicts"), NODES, ids=[f"{n[0]}-{n[3]}" for n in NODES])
def test_the_doctor_on_a_kind_of_node(
    family_cells: dict[str, Cell], name: str, arch: str, brand: str, driver: str, verdicts: tuple[str, ...]
) -> None:
    node = Node(driver, (Gpu(name, arch, brand),), True, "given", toolkit="1.17.8")
    said = {family: _said(cell, node) for family, cell in family_cells.items()}
    assert said == dict(zip(FAMILIES, verdicts, strict=True))


def test_every_kind_of_node_in_the_issue_is_here() -> None:
    kinds = {(name, driver) for name, _, _, driver, _ in NODES}
    assert kinds >= {("T4", "418.87.01"), ("V100", "418.87.01"), ("A100", "450.80.02"), ("P100", "450.51.06"),
                     ("A10", "470.82.01"), ("RTX 3090", "510.47.03"), ("A100", "515.65.01"), ("L4", "525.60.13"),
                     ("RTX 4090", "525.60.13"), ("H100", "535.104.05"), ("GTX 1080", "550.54.15"),
                     ("H200", "580.65.06")}  # fmt: skip
