"""GPU model names as fleets write them, to compute capability (developer.nvidia.com/cuda-gpus and the sources in
model.gpumodels), and the doctor judging a node given by model names."""

from __future__ import annotations

import pytest

from dlimages.core.errors import InputError
from dlimages.model import gpumodels, toolkit
from dlimages.model.cells import Expansion
from dlimages.model.doctor import report, verdict
from dlimages.model.gpunode import Node, node_from_flags


def _no_probe() -> Node:
    raise AssertionError("a node given by flags is not probed")


@pytest.mark.parametrize(
    ("name", "model", "arch"),
    [
        # nvidia-smi's names (the H100 and V100 ones as in the doctor's probe tests)
        ("NVIDIA H100 80GB HBM3", "H100", "sm_90"),
        ("NVIDIA A100-SXM4-80GB", "A100", "sm_80"),
        ("Tesla V100-SXM2-32GB", "V100", "sm_70"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "sm_89"),
        ("NVIDIA H20", "H20", "sm_90"),  # thu-ml/SageAttention#260
        ("NVIDIA L20", "L20", "sm_89"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", "sm_89"),  # not the Turing Quadro RTX 6000
        ("Quadro RTX 6000", "Quadro RTX 6000", "sm_75"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", "sm_120"),
        # GPU Feature Discovery's nvidia.com/gpu.product labels: dashes for spaces
        ("NVIDIA-H100-80GB-HBM3", "H100", "sm_90"),
        ("Tesla-T4", "T4", "sm_75"),
        ("NVIDIA-L40S", "L40S", "sm_89"),  # an L40S, not an L40
        ("NVIDIA-B200", "B200", "sm_100"),
        ("NVIDIA-GB200", "GB200", "sm_100"),
        ("NVIDIA-A800-SXM4-80GB", "A800", "sm_80"),
        ("NVIDIA-H800", "H800", "sm_90"),
        # as people type them
        ("h200", "H200", "sm_90"),
        ("RTX5090", "GeForce RTX 5090", "sm_120"),
        ("rtx 3090 ti", "GeForce RTX 3090 Ti", "sm_86"),
    ],
)
def test_names_as_fleets_write_them_give_the_model_and_its_compute_capability(name: str, model: str, arch: str) -> None:
    found = gpumodels.find(name)
    assert found is not None and (found.name, found.arch) == (model, arch)
    assert found.source.startswith("https://")


@pytest.mark.parametrize("name", ["NVIDIA A10G", "hopper", "H", "RTX", "sm_90", "", "AMD Instinct MI300X"])
def test_what_names_no_listed_model_is_none(name: str) -> None:
    assert gpumodels.find(name) is None


def test_every_superchip_with_a_grace_cpu_is_on_an_arm_host_and_no_other_model_says_so() -> None:
    arm = {model.name for model in gpumodels.MODELS if model.host_arch == gpumodels.ARM64}
    assert arm == {"GH200", "GB200", "GB300", "GB10"}


def test_a_node_given_by_model_names_gets_their_archs_and_brands() -> None:
    node = node_from_flags("H100, GeForce RTX 4090,sm_86", "550.54.15", _no_probe)
    assert [(g.name, g.arch, g.brand) for g in node.gpus] == [
        ("H100", "sm_90", "nvidia"),
        ("GeForce RTX 4090", "sm_89", "geforcertx"),
        ("GPU 2", "sm_86", None),
    ]
    assert node.cpu is None  # nothing in the names says which CPU the host has


def test_a_gb200_node_has_an_arm_cpu_and_no_image_runs_there(expansion: Expansion) -> None:
    node = node_from_flags("GB200", "580.65.06", _no_probe)
    assert node.cpu == "arm64"
    for cell in expansion.cells:
        judged = verdict(cell, node)
        assert not judged.runs
        assert any("CPU is arm64" in reason and "linux/amd64 only" in reason for reason in judged.reasons)
    same_gpu_on_amd64 = verdict(expansion.cells[-1], node_from_flags("B200", "580.65.06", _no_probe))
    assert not any("CPU is" in reason for reason in same_gpu_on_amd64.reasons)


def test_a_name_that_is_no_model_is_refused_naming_what_is_allowed() -> None:
    with pytest.raises(InputError) as raised:
        node_from_flags("A10G", "550.54.15", _no_probe)
    (problem,) = raised.value.problems
    assert problem.where == "--gpu" and "'A10G' is no GPU model or architecture" in problem.message
    assert "H100" in problem.allowed and "sm_90" in problem.allowed


def test_toolkit_none_is_a_node_where_no_gpu_container_starts() -> None:
    node = node_from_flags("H100", "550.54.15", _no_probe, kit="none")
    assert node.container_runtime is False and node.toolkit == toolkit.NONE


def test_the_json_verdict_says_the_cpu_as_a_condition_and_cites_its_source(expansion: Expansion) -> None:
    [row] = report(expansion.cells[:1], node_from_flags("GH200", "580.65.06", _no_probe))
    assert row["condition"] == "cpu-architecture" and gpumodels.ARM_HOSTS in row["sources"]
    [row] = report(expansion.cells[:1], node_from_flags("H100", "550.54.15", _no_probe, kit="none"))
    assert row["condition"] == "no-container-runtime"
