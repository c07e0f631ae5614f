"""Nodes that cannot exist (model/architectures): a GPU on a driver branch older than the first that runs it, or newer
than the last that supports it. Given by flags, an input error (exit 2) naming why and what is allowed; in a fleet
file or a `kubectl get nodes -o json`, a refused node beside the judged ones.

Each case cites its fact, by the key in brackets:
[matrix]  NVIDIA's architecture matrix, https://docs.nvidia.com/datacenter/tesla/drivers/
          cuda-toolkit-driver-and-architecture-matrix.html: first CUDA toolkit per architecture (Blackwell 10.0 12.0:
          CUDA 12.8; Hopper 9.0 and Ada 8.9: CUDA 11.8; Ampere 8.0 8.6: CUDA 11.0) and "Last Driver Support" (Volta,
          Pascal, Maxwell: R580; Kepler 3.x: R470)
[table3]  the driver each first toolkit lists (CUDA release notes, Table 3): 12.8 GA >=570.26, 11.8 GA >=520.61.05,
          11.0 GA >=450.51.06; a first branch is that driver's branch (for Hopper and Ada an inference, which the
          message says)
[r450]    R450's first data-center release, 450.51.05 of 07/07/2020, carries the A100's VBIOS, and is older than
          CUDA 11.0's 450.51.06: https://docs.nvidia.com/datacenter/tesla/tesla-release-notes-450-51-05/index.html
[r520]    the RTX 4090 came out on an R520 driver older than CUDA 11.8's 520.61.05 (520.56.06, as an RTX 3090 on it in
          test_doctor.py's table): floors are branches, never a toolkit's full version
"""

from __future__ import annotations

import json

import pytest

from dlimages.core.errors import InputError
from dlimages.model import architectures
from dlimages.model.cells import Expansion
from dlimages.model.fleet import IMPOSSIBLE, fleet_rows, fleet_table, read_fleet
from dlimages.model.gpunode import Gpu, ImpossibleNode, Node, node_from_flags

CASES: list[tuple[str, str, str | None, str | None]] = [
    # gpu, driver, the architecture that makes it impossible (None: the node can exist), what is allowed
    ("B200", "550.54.15", "Blackwell", "a driver of branch R570 or newer"),  # [matrix][table3]
    ("B200", "R550", "Blackwell", "a driver of branch R570 or newer"),
    ("GB200", "565.57.01", "Blackwell", "a driver of branch R570 or newer"),
    ("RTX 5090", "560.35.05", "Blackwell", "a driver of branch R570 or newer"),
    ("B200", "570.26", None, None),  # CUDA 12.8 GA's listed driver [table3]
    ("B200", "R570", None, None),
    ("RTX 5090", "R580", None, None),
    ("H100", "515.65.01", "Hopper", "a driver of branch R520 or newer"),  # [matrix][table3], inferred
    ("H20", "510.47.03", "Hopper", "a driver of branch R520 or newer"),
    ("L40S", "515.65.01", "Ada", "a driver of branch R520 or newer"),
    ("RTX 4090", "520.56.06", None, None),  # [r520]
    ("L4", "R535", None, None),
    ("A100", "440.64.00", "Ampere", "a driver of branch R450 or newer"),  # [matrix][table3]
    ("RTX 3090", "418.87.01", "Ampere", "a driver of branch R450 or newer"),
    ("A100", "450.51.05", None, None),  # [r450]
    ("V100", "R580", None, None),  # [matrix]: R580 is Volta's last branch
    ("V100", "590.44.01", "Volta", "a driver of branch R580 or older"),
    ("P100", "R590", "Pascal", "a driver of branch R580 or older"),
    ("GTX 1080", "R595", "Pascal", "a driver of branch R580 or older"),
    ("sm_37", "535.104.05", "Kepler", "a driver of branch R470 or older"),  # [matrix]: Kepler 3.7, R470
    ("T4", "418.87.01", None, None),  # Turing: no first branch recorded, no floor
]


def _no_probe() -> Node:
    raise AssertionError("a node given by flags is not probed")


@pytest.mark.parametrize(("gpu", "driver", "architecture", "allowed"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_node_that_cannot_exist_is_an_input_error_naming_why(
    gpu: str, driver: str, architecture: str | None, allowed: str | None
) -> None:
    if architecture is None:
        node = node_from_flags(gpu, driver, _no_probe)
        assert node.gpus and node.driver
        return
    with pytest.raises(ImpossibleNode) as raised:
        node_from_flags(gpu, driver, _no_probe)
    assert isinstance(raised.value, InputError)  # exit 2, as every input error
    [problem] = raised.value.problems
    assert problem.where == "--gpu and --driver"
    assert " is a node that cannot exist: " in problem.message and architecture in problem.message
    assert architectures.MATRIX in problem.message
    assert problem.allowed.startswith(allowed or "")


def test_a_floor_from_a_toolkit_alone_says_it_is_inferred() -> None:
    with pytest.raises(ImpossibleNode) as raised:
        node_from_flags("H100", "515.65.01", _no_probe)
    [problem] = raised.value.problems
    assert problem.message.startswith("H100 (sm_90) on driver 515.65.01 is a node that cannot exist: Hopper (sm_90)")
    assert "inferred from the toolkit" in problem.message


def test_a_branch_is_named_with_the_release_it_was_judged_at() -> None:
    with pytest.raises(ImpossibleNode) as raised:
        node_from_flags("B200", "R550", _no_probe)
    [problem] = raised.value.problems
    assert problem.message.startswith("B200 (sm_100) on driver 550.54.14 (R550's first release) is a node that cannot")
    assert problem.allowed == "a driver of branch R570 or newer for B200"


def test_only_the_gpus_the_driver_cannot_run_are_named() -> None:
    with pytest.raises(ImpossibleNode) as raised:
        node_from_flags("H100,B200,B200", "550.54.15", _no_probe)
    assert [p.message.split(" on ")[0] for p in raised.value.problems] == ["B200 (sm_100)"]


def test_a_probed_host_is_never_refused() -> None:
    """A host that answers nvidia-smi exists, whatever the table says."""
    host = Node("550.54.15", (Gpu("NVIDIA B200", "sm_100", "nvidia"),), True, "this host")
    assert node_from_flags(None, None, lambda: host) is host


FLEET = """\
- {name: good, gpu: H100, driver: 550.54.15}
- {name: early-blackwell, gpu: B200, driver: 550.54.15}
- {name: late-pascal, gpu: P100, driver: R590}
"""


def test_a_fleet_file_lists_an_impossible_node_as_refused_and_judges_the_others(expansion: Expansion) -> None:
    fleet = read_fleet(FLEET, "fleet.yaml")
    assert [name for name, _ in fleet.nodes] == ["good"]
    assert [name for name, _ in fleet.refused] == ["early-blackwell", "late-pascal"]
    why = dict(fleet.refused)
    assert (
        "Blackwell" in why["early-blackwell"] and "(allowed: a driver of branch R570 or newer" in why["early-blackwell"]
    )
    assert "up to branch R580" in why["late-pascal"]
    cells = expansion.cells[:3]
    table = fleet_table(cells, fleet)
    assert table.splitlines()[0] == "| image | good |"
    assert "refused, a node that cannot exist: early-blackwell: B200 (sm_100) on driver 550.54.15 is a node" in table
    rows = fleet_rows(cells, fleet)
    refused = [row for row in rows if row["node"] == "late-pascal"]
    assert len(refused) == len(cells) and all(row["condition"] == IMPOSSIBLE for row in refused)
    assert all(row["runs"] is False and architectures.MATRIX in row["sources"] for row in refused)  # type: ignore[operator]
    assert json.loads(json.dumps(rows)) == rows


def test_a_node_whose_file_entry_cannot_be_read_still_stops_the_file() -> None:
    """Unreadable is not impossible: a typo in a flag's grammar is the file's author's to fix (test_fleet.py)."""
    with pytest.raises(InputError) as raised:
        read_fleet("- {name: a, gpu: H100, driver: latest}\n- {name: b, gpu: B200, driver: 550.54.15}\n", "f")
    assert not isinstance(raised.value, ImpossibleNode)


def test_a_kubernetes_node_that_cannot_exist_is_refused() -> None:
    """GPU Feature Discovery's labels give full driver versions (nvidia.com/cuda.driver-version.full)."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/cuda.driver-version.full": "550.54.15"}
    nodes = {"items": [{"metadata": {"name": "gpu-b200", "labels": labels}}]}
    fleet = read_fleet(json.dumps(nodes), "nodes.json")
    assert fleet.nodes == () and [name for name, _ in fleet.refused] == ["gpu-b200"]
    assert "no node to judge" in fleet_table((), fleet)
