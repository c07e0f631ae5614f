"""`--driver R580`: a driver branch judged at its first release (model/branches), and the report saying so.

The first releases, each from docs/notes/research-cuda-drivers.md (Q1, Q4):
[535]  https://docs.nvidia.com/datacenter/tesla/tesla-release-notes-535-54-03: "Linux driver release date: 06/26/2023"
[550]  redistrib_550.54.14.json, "release_date": "2024-02-23"; CUDA 12.4 GA ">=550.54.14" (Table 3)
[570]  redistrib_570.86.15.json, "release_date": "2025-01-27", R570's first data-center release; CUDA 12.8 GA lists
       ">=570.26", which no source shows as a published driver (the choice: see model/branches)
[575]  CUDA 12.9 GA ">=575.51.03" (Table 3 of https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/)
[580]  redistrib_580.65.06.json, "release_date": "2025-08-04"; CUDA 13.0 GA ">=580.65.06"
[590]  CUDA 13.1 GA ">=590.44.01"; NVIDIA's forum: "Current beta release" 590.44.01
[595]  CUDA 13.2 GA ">=595.45.04"; NVIDIA's forum: "Current beta release: 595.45.04"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from dlimages.core.errors import InputError
from dlimages.model import branches, compat, requirecuda
from dlimages.model.cells import Cell
from dlimages.model.compat import DriverRule
from dlimages.model.doctor import report, verdict
from dlimages.model.doctor_text import describe_node
from dlimages.model.fleet import read_fleet
from dlimages.model.gpunode import Gpu, Node, node_from_flags, parse_driver_or_branch

FIRST_RELEASES = [
    ("R535", "535.54.03"),  # [535]
    ("r550", "550.54.14"),  # [550]
    ("570", "570.86.15"),  # [570]
    ("R575", "575.51.03"),  # [575]
    (" R580 ", "580.65.06"),  # [580]
    ("r590", "590.44.01"),  # [590]
    ("595", "595.45.04"),  # [595]
]


def _no_probe() -> Node:
    raise AssertionError("a node given by flags is not probed")


@pytest.mark.parametrize(("given", "first"), FIRST_RELEASES)
def test_a_branch_is_judged_at_its_first_release(given: str, first: str) -> None:
    assert parse_driver_or_branch(given) == (first, int(first.split(".")[0]))


def test_a_full_version_is_taken_as_it_is() -> None:
    assert parse_driver_or_branch("535.104.05") == ("535.104.05", None)
    assert parse_driver_or_branch("570.26") == ("570.26", None)


def test_every_branch_of_the_table_starts_on_its_own_branch_and_names_a_source() -> None:
    assert [b.name for b in branches.BRANCHES] == ["R535", "R550", "R570", "R575", "R580", "R590", "R595"]
    for branch in branches.BRANCHES:
        assert requirecuda.driver_key(branch.first_release)[0] == branch.number
        assert "https://" in branch.source


@pytest.mark.parametrize("given", ["R470", "r999", "560", "R1000"])
def test_a_branch_whose_first_release_is_not_known_is_an_input_error_listing_the_known_ones(given: str) -> None:
    with pytest.raises(InputError) as raised:
        node_from_flags("H100", given, _no_probe)
    [problem] = raised.value.problems
    assert problem.where == "--driver"
    assert problem.message == f"{given!r} is a driver branch whose first release is not known here (model/branches)"
    assert problem.allowed.endswith("or a branch: R535, R550, R570, R575, R580, R590, R595")


# The last: R580 in fullwidth digits, which Python's \d would take for digits.
@pytest.mark.parametrize("given", ["latest", "R580.x", "580.", "R-580", "R\uff15\uff18\uff10"])
def test_anything_else_is_neither_a_version_nor_a_branch(given: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_driver_or_branch(given)
    [problem] = raised.value.problems
    assert problem.where == "--driver" and "is not an NVIDIA driver version or branch" in problem.message


def test_the_report_says_the_branch_was_judged_at_its_first_release(cell: Callable[[str, str], Cell]) -> None:
    node = node_from_flags("H100", "R580", _no_probe)
    assert (node.driver, node.branch) == ("580.65.06", 580)
    assert describe_node(node).startswith("node (given): driver 580.65.06 (R580's first release); GPUs: H100")
    wheels = cell("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")
    judged = verdict(wheels, node)
    said = "driver given as R580: judged at R580's first release, 580.65.06: a later 580.x may run more"
    assert judged.runs and any(note.startswith(said) for note in judged.notes)
    [row] = report([wheels], node)
    assert f"{branches.REDIST}/redistrib_580.65.06.json" in row["sources"]  # type: ignore[operator]
    # A full version says nothing of the kind.
    assert not any(
        "judged at" in note for note in verdict(wheels, node_from_flags("H100", "580.65.06", _no_probe)).notes
    )


def test_a_fleet_files_driver_may_be_a_branch() -> None:
    text = "- {name: a, gpu: B200, driver: R580}\n- {name: b, gpu: H100, driver: 570}\n"  # 570: YAML reads a number
    nodes = dict(read_fleet(text, "fleet.yaml").nodes)
    assert (nodes["a"].driver, nodes["a"].branch) == ("580.65.06", 580)
    assert (nodes["b"].driver, nodes["b"].branch) == ("570.86.15", 570)


def test_r570_at_570_86_15_or_at_570_26_gives_the_same_verdicts(cell: Callable[[str, str], Cell]) -> None:
    """[570]: the choice between the first data-center release and CUDA 12.8 GA's listed driver changes no verdict:
    a driver reports its branch's CUDA, so the branch decides (compat.DriverRule.supports_cuda). The cell is built
    here, a CUDA 12.8 build from wheels (toolkit driver 570.26, the 12.x minor-version floor 525.60.13, as the CUDA 12.8
    GA row of Table 3 and the minor-version compatibility page give them)."""
    base = cell("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")
    sass = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
    require = compat.wheel_require_cuda("12.8", "570.26", "525.60.13", None)
    rule = DriverRule("12.8", "570.26", "525.60.13", None, None, require)
    cu128: Cell = dataclasses.replace(base, cuda="12.8", arch_sass=sass, arch_ptx=(), driver=rule)
    for gpu in (
        Gpu("B200", "sm_100", "nvidia"),
        Gpu("H100", "sm_90", "nvidia"),
        Gpu("RTX 4090", "sm_89", "geforcertx"),
    ):
        at_first = verdict(cu128, Node("570.86.15", (gpu,), True, "given"))
        at_listed = verdict(cu128, Node("570.26", (gpu,), True, "given"))
        assert (at_first.runs_through, at_listed.runs_through) == (compat.TOOLKIT_DRIVER, compat.TOOLKIT_DRIVER)
