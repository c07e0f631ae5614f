"""NVIDIA's GPU architectures by compute capability: the first driver branch that runs each, the last branch and the
last CUDA major that support it, each with its source. The doctor refuses nodes these make impossible (a Blackwell
GPU on R550, a Pascal GPU on R590) and names why a newer CUDA has no code for an old GPU (CUDA 13 on a V100).

The table follows NVIDIA's "CUDA Toolkit, Driver, and Architecture Matrix" (MATRIX): its "Last Driver Support" and
"Last CUDA Toolkit Support" columns are facts; a first branch is the branch of the driver that the architecture's
first CUDA toolkit lists (that toolkit's own driver runs its GPUs), an inference where no NVIDIA page says more, and
the row says so. Branches, not full versions: NVIDIA published drivers of a branch before a toolkit's listed one
(R450's first data-center release, 450.51.05, carries A100 firmware; CUDA 11.0 lists 450.51.06), so a full version
would refuse real nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlimages.model.branches import TOOLKIT_DRIVERS  # Table 3 of the CUDA release notes, as model/branches reads it

MATRIX = "https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html"
# "CUDA 13.0 supports all NVIDIA architectures from Turing through Grace Blackwell."
CUDA_13_ARCHS = "https://docs.nvidia.com/cuda/cuda-features-archive/index.html"
# NVIDIA's first R450 data-center driver, 450.51.05 of 07/07/2020, lists the A100's VBIOS.
R450_FIRST = "https://docs.nvidia.com/datacenter/tesla/tesla-release-notes-450-51-05/index.html"


@dataclass(frozen=True)
class Architecture:
    name: str
    archs: tuple[str, ...]  # compute capabilities as sm_XY
    first_branch: int | None = None  # no driver branch older than this runs it; None: not recorded here
    first_why: str = ""  # how the first branch is known, with its source
    last_branch: int | None = None  # no driver branch newer than this supports it; None: supported today
    last_cuda: int | None = None  # the last CUDA major with compiler and library support; None: supported today

    @property
    def title(self) -> str:
        return f"{self.name} ({', '.join(self.archs)})"


ARCHITECTURES = (
    Architecture(
        "Blackwell",
        ("sm_100", "sm_103", "sm_120", "sm_121"),
        570,
        f"their first toolkit, CUDA 12.8, lists driver >= 570.26 ({MATRIX}: Blackwell 10.0 12.0, CUDA 12.8; "
        f"{TOOLKIT_DRIVERS}, Table 3); sm_103 and sm_121 came with CUDA 12.9 (R575), held here to R570 too",
    ),
    Architecture(
        "Hopper",
        ("sm_90",),
        520,
        f"their first toolkit, CUDA 11.8, lists driver >= 520.61.05 ({MATRIX}: Hopper 9.0, CUDA 11.8; "
        f"{TOOLKIT_DRIVERS}, Table 3); inferred from the toolkit, no NVIDIA page names the branch",
    ),
    Architecture(
        "Ada",
        ("sm_89",),
        520,
        f"their first toolkit, CUDA 11.8, lists driver >= 520.61.05 ({MATRIX}: Ada 8.9, CUDA 11.8; "
        f"{TOOLKIT_DRIVERS}, Table 3); inferred from the toolkit, no NVIDIA page names the branch",
    ),
    Architecture(
        "Ampere",
        ("sm_80", "sm_86"),
        450,
        f"their first toolkit, CUDA 11.0, lists driver >= 450.51.06 ({MATRIX}: 8.0 8.6, CUDA 11.0; {TOOLKIT_DRIVERS}, "
        f"Table 3), and R450's first data-center release, 450.51.05, carries the A100's firmware ({R450_FIRST})",
    ),
    Architecture("Turing", ("sm_75",)),
    Architecture("Volta", ("sm_70",), last_branch=580, last_cuda=12),
    Architecture("Pascal", ("sm_60", "sm_61"), last_branch=580, last_cuda=12),
    Architecture("Maxwell", ("sm_50", "sm_52", "sm_53"), last_branch=580, last_cuda=12),
    Architecture("Kepler", ("sm_35", "sm_37"), last_branch=470, last_cuda=11),
    Architecture("Kepler", ("sm_30", "sm_32"), last_branch=470, last_cuda=10),
)
# Each compute capability's architecture ("sm_70" -> Volta).
_BY_ARCH = {arch: architecture for architecture in ARCHITECTURES for arch in architecture.archs}


@dataclass(frozen=True)
class Unsupported:
    """Why no GPU of an architecture runs on a driver branch, and the branches that run it."""

    why: str
    allowed: str


def unsupported(arch: str | None, branch: int) -> Unsupported | None:
    """Why no GPU of `arch` runs on a driver of `branch` (so such a node cannot exist), or None when one may.

    Example: unsupported("sm_100", 550).allowed == "a driver of branch R570 or newer"; unsupported("sm_61", 590) says
    Pascal's last branch is R580; unsupported("sm_90", 535) is None.
    """
    found = _BY_ARCH.get(arch or "")
    if found is None:
        return None
    if found.first_branch is not None and branch < found.first_branch:
        return Unsupported(
            f"{found.title} GPUs need a driver of branch R{found.first_branch} or newer: {found.first_why}",
            f"a driver of branch R{found.first_branch} or newer",
        )
    if found.last_branch is not None and branch > found.last_branch:
        return Unsupported(
            f"NVIDIA's drivers support {found.title} GPUs up to branch R{found.last_branch} ({MATRIX}: {found.name}, "
            f"Last Driver Support R{found.last_branch})",
            f"a driver of branch R{found.last_branch} or older",
        )
    return None


def dropped_by(arch: str | None, cuda: str) -> str | None:
    """Why CUDA `cuda` ("13.0") has no code for GPUs of `arch`, where its major dropped their architecture; else None.

    Example: dropped_by("sm_70", "13.0") names CUDA 13.0's removal of Maxwell, Pascal and Volta.
    """
    found = _BY_ARCH.get(arch or "")
    major = int(cuda.split(".")[0])
    if found is None or found.last_cuda is None or major <= found.last_cuda:
        return None
    if found.last_cuda == 12:
        # The release notes' own words (2.6.2 Deprecated Architectures, through the copy in the research notes).
        return (
            f"CUDA 13.0 removed offline compilation and library support for Maxwell, Pascal and Volta: CUDA {cuda} "
            f"builds carry no code for {found.title} GPUs ({CUDA_13_ARCHS}; {MATRIX}: {found.name}, Last CUDA Toolkit "
            "Support CUDA 12.x)"
        )
    return (
        f"{found.title} GPUs were last supported by CUDA {found.last_cuda}.x: CUDA {cuda} builds carry no code for "
        f"them ({MATRIX})"
    )
