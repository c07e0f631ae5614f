"""`invoke doctor --nodes FILE`: a file of nodes, or `kubectl get nodes -o json` with GPU Feature Discovery's labels
(the label names as NVIDIA's k8s-device-plugin documents them), judged together as a node-by-image table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.core.errors import InputError
from dlimages.model.fleet import read_fleet

REPO = Path(__file__).resolve().parents[3]


def _kube_node(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "status": {}}


KUBECTL = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        _kube_node(
            "gpu-h100",
            {
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.compute.major": "9",
                "nvidia.com/gpu.compute.minor": "0",
                "nvidia.com/cuda.driver-version.full": "550.54.15",
            },
        ),
        _kube_node(  # an older GFD: the driver in its deprecated parts, no compute labels
            "gpu-t4",
            {
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": "Tesla-T4",
                "nvidia.com/cuda.driver.major": "470",
                "nvidia.com/cuda.driver.minor": "82",
                "nvidia.com/cuda.driver.rev": "01",
            },
        ),
        _kube_node(
            "gpu-gb200",
            {
                "kubernetes.io/arch": "arm64",
                "nvidia.com/gpu.product": "NVIDIA-GB200",
                "nvidia.com/gpu.count": "4",
                "nvidia.com/cuda.driver-version.full": "580.65.06",
            },
        ),
        _kube_node("cpu-only", {"kubernetes.io/arch": "amd64"}),
    ],
}


def test_a_kubernetes_node_list_is_read_through_gfds_labels() -> None:
    fleet = read_fleet(json.dumps(KUBECTL), "nodes.json")
    nodes = dict(fleet.nodes)
    assert list(nodes) == ["gpu-h100", "gpu-t4", "gpu-gb200"] and fleet.left_out == ("cpu-only",)
    h100 = nodes["gpu-h100"]
    assert (h100.driver, len(h100.gpus), h100.gpus[0].arch, h100.gpus[0].brand, h100.cpu) == (
        "550.54.15",
        8,
        "sm_90",
        "nvidia",
        "amd64",
    )
    t4 = nodes["gpu-t4"]
    assert (t4.driver, t4.gpus[0].name, t4.gpus[0].arch, t4.gpus[0].brand) == ("470.82.01", "T4", "sm_75", "nvidia")
    assert nodes["gpu-gb200"].cpu == "arm64" and nodes["gpu-gb200"].gpus[0].arch == "sm_100"


@pytest.mark.parametrize(
    "item", [{"metadata": "x"}, {"metadata": {"labels": ["nvidia.com/gpu.product=T4"]}}], ids=["metadata", "labels"]
)
def test_a_malformed_kubernetes_item_is_named_with_exit_2_not_a_traceback(item: object) -> None:
    with pytest.raises(InputError) as caught:
        read_fleet(json.dumps({"kind": "List", "items": [KUBECTL["items"][0], item]}), "nodes.json")
    assert "--nodes nodes.json: item 2: is not a node: metadata.labels must be an object of labels" in str(caught.value)


def test_a_file_of_nodes_is_read_as_the_doctors_flags() -> None:
    text = (
        "- {name: a, gpu: 'A100,A100', driver: 535.104.05}\n"
        "- {name: b, gpu: sm_86, driver: 470.82.01, brand: geforcertx}\n"
    )
    nodes = dict(read_fleet(text, "fleet.yaml").nodes)
    assert [g.arch for g in nodes["a"].gpus] == ["sm_80", "sm_80"] and nodes["b"].gpus[0].brand == "geforcertx"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("- {name: a, gpu: A10G, driver: 535.104.05}\n", "node 1 (a): --gpu"),
        ("- {name: a, gpu: H100}\n", "needs gpu and driver"),
        ("- {name: a, gpu: H100, driver: 535.104.05, cpu: riscv}\n", "cpu"),
        ("{}", "holds no node"),
        ("[unclosed", "is not YAML or JSON"),
        (
            json.dumps({"items": [_kube_node("x", {"nvidia.com/gpu.product": "NVIDIA-H100"})]}),
            "no driver version label",
        ),
    ],
)
def test_a_node_that_cannot_be_read_is_an_input_error_naming_it(text: str, says: str) -> None:
    with pytest.raises(InputError) as raised:
        read_fleet(text, "f")
    assert any(says in f"{p.where}: {p.message}" for p in raised.value.problems), raised.value.problems


def test_the_fleet_table_and_json_from_the_command(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(KUBECTL))
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "doctor", "--nodes", str(nodes)]
    table = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "| image | gpu-h100 | gpu-t4 | gpu-gb200 |"
    rows = [line for line in lines if line.startswith("| lab/")]
    assert rows and all(row.endswith("| NO |") for row in rows)  # no amd64 image runs on Grace
    assert any(" | runs | " in row for row in rows)  # some run on the H100 node
    assert "left out (no NVIDIA GPU labels): cpu-only" in table.stdout
    as_json = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=120, check=False)
    verdicts = json.loads(as_json.stdout)
    assert {row["node"] for row in verdicts} == {"gpu-h100", "gpu-t4", "gpu-gb200"}
    assert len(verdicts) == 3 * len(rows)
    both = subprocess.run([*argv, "--gpu", "H100"], capture_output=True, text=True, timeout=120, check=False)
    assert both.returncode == 2 and "--gpu cannot be given with it" in both.stderr
