"""NVIDIA driver branches by their first release, each with its source: `--driver R580` is judged at 580.65.06, the
oldest driver of R580, and the report says so (a later 580.x may run more).

Sources, as docs/notes/research-cuda-drivers.md (Q1, Q4) checked them: NVIDIA's data-center release notes and driver
redistribution manifests where they give a branch's first release; else the driver Table 3 of the CUDA release notes
lists for the toolkit that came with the branch (CUDA Toolkit and Corresponding Driver Versions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REDIST = "https://developer.download.nvidia.com/compute/nvidia-driver/redist"
TOOLKIT_DRIVERS = "https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html"
# NVIDIA's forum post of current Linux releases, whose versions name 590.44.01 and 595.45.04 as beta releases.
CURRENT_RELEASES = "https://forums.developer.nvidia.com/t/current-graphics-driver-releases/28500"


@dataclass(frozen=True)
class Branch:
    number: int  # 580
    first_release: str  # its oldest driver: "580.65.06"
    source: str  # where that is said

    @property
    def name(self) -> str:
        return f"R{self.number}"


BRANCHES = (
    Branch(
        535,
        "535.54.03",
        "https://docs.nvidia.com/datacenter/tesla/tesla-release-notes-535-54-03 (Linux driver release date "
        f"06/26/2023); CUDA 12.2 GA lists >= 535.54.03 ({TOOLKIT_DRIVERS}, Table 3)",
    ),
    Branch(
        550,
        "550.54.14",
        f"{REDIST}/redistrib_550.54.14.json (release_date 2024-02-23); CUDA 12.4 GA lists >= 550.54.14 "
        f"({TOOLKIT_DRIVERS}, Table 3)",
    ),
    # CUDA 12.8 GA lists >= 570.26, but no source shows a 570.26 driver published; 570.86.15 is R570's first data-center
    # release. No rule of the matrix falls between the two: the branch itself (R570 runs CUDA 12.8) decides.
    Branch(
        570,
        "570.86.15",
        f"{REDIST}/redistrib_570.86.15.json (release_date 2025-01-27), R570's first data-center release; CUDA 12.8 GA "
        f"lists >= 570.26 ({TOOLKIT_DRIVERS}, Table 3)",
    ),
    Branch(575, "575.51.03", f"CUDA 12.9 GA lists >= 575.51.03 ({TOOLKIT_DRIVERS}, Table 3)"),
    Branch(
        580,
        "580.65.06",
        f"{REDIST}/redistrib_580.65.06.json (release_date 2025-08-04); CUDA 13.0 GA lists >= 580.65.06 "
        f"({TOOLKIT_DRIVERS}, Table 3)",
    ),
    Branch(
        590,
        "590.44.01",
        f"CUDA 13.1 GA lists >= 590.44.01 ({TOOLKIT_DRIVERS}, Table 3), released as a beta ({CURRENT_RELEASES}/7)",
    ),
    Branch(
        595,
        "595.45.04",
        f"CUDA 13.2 GA lists >= 595.45.04 ({TOOLKIT_DRIVERS}, Table 3), released as a beta ({CURRENT_RELEASES}/12)",
    ),
)
BY_NUMBER = {branch.number: branch for branch in BRANCHES}  # 580 -> R580
# How people write a branch: R580, r580, 580 (ASCII digits only).
BRANCH_FORM = re.compile(r"[Rr]?(?P<number>[1-9][0-9]{2,3})")
KNOWN = ", ".join(branch.name for branch in BRANCHES)


def judged_at(branch: Branch) -> str:
    """What a report says of a driver given as a branch."""
    return (
        f"driver given as {branch.name}: judged at {branch.name}'s first release, {branch.first_release}: a later "
        f"{branch.number}.x may run more ({branch.source})"
    )
