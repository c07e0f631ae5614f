"""The container toolkit's version in the doctor's verdicts (model/toolkit, issue 19 items 3 and 4): whether it loads
an image's cuda-compat libraries, read from the node or given with --toolkit.

Sources for each expectation: nvidia-container-toolkit CHANGELOG.md (v1.17.4: "Disable mounting of compat libs from
container by default", feature flag allow-cuda-compat-libs-from-container; v1.17.5: the `enable-cuda-compat` hook, for
the nvidia runtime and CDI; v1.17.7 release notes: `cuda-compat-mode` defaults to `ldconfig`, which fixes `--gpus`),
and libnvidia-container's 1.0.0 changelog ("Add support for CUDA forward compatibility").
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.gpu.probe import probe_toolkit
from dlimages.model import compat, toolkit
from dlimages.model.cells import Cell
from dlimages.model.doctor import verdict
from dlimages.model.gpunode import Gpu, Node, node_from_flags

# TensorFlow 2.4.4 on nvidia/cuda 11.0.3: a Tesla GPU on R418 runs it only through forward compatibility.
FORWARD_CELL = ("tensorflow", "cuda11.0-tf2.4.4-py3.8-runtime")


def _node(kit: str | None) -> Node:
    return Node("418.87.01", (Gpu("Tesla T4", "sm_75", "tesla"),), True, "given", toolkit=kit)


@pytest.mark.parametrize(
    ("kit", "loads", "says"),
    [
        ("1.14.3", True, "loads the image's cuda-compat libraries (--gpus and --runtime=nvidia)"),
        ("1.17.3", True, "(--gpus and --runtime=nvidia)"),
        ("1.17.4", False, "unless its feature flag allow-cuda-compat-libs-from-container is set (CVE-2025-23359)"),
        ("1.17.5", True, "only through --runtime=nvidia or CDI (its enable-cuda-compat hook), not with plain --gpus"),
        ("1.17.6", True, "not with plain --gpus"),
        ("1.17.7", True, "(cuda-compat-mode=ldconfig, unless set to disabled)"),
        ("1.18.0", True, "(cuda-compat-mode=ldconfig, unless set to disabled)"),
        (None, True, "1.17.4 only with its feature flag allow-cuda-compat-libs-from-container"),
    ],
)
def test_what_each_toolkit_does_with_an_images_compat_libraries(kit: str | None, loads: bool, says: str) -> None:
    found = toolkit.compat_libraries(kit)
    assert found.loads is loads and says in found.condition


def test_forward_compatibility_follows_the_nodes_toolkit(cell: Callable[[str, str], Cell]) -> None:
    forward = cell(*FORWARD_CELL)
    unknown = verdict(forward, _node(None))
    assert unknown.runs and unknown.runs_through == compat.FORWARD_COMPAT
    assert toolkit.UNKNOWN in unknown.notes, "the condition is said whenever the toolkit is not known"
    # 1.17.4 leaves the compat libraries out: CUDA 11.0 on R418's own driver, below 11.0's 450.51.06 (#934, #906).
    refused = verdict(forward, _node("1.17.4"))
    assert not refused.runs and refused.needs_driver == forward.driver.toolkit_driver
    assert refused.reasons[0].startswith("container toolkit 1.17.4 does not load")
    assert f"so CUDA runs on the host's driver alone ({toolkit.HOST_ALONE})" in refused.reasons[0]
    gated = verdict(forward, _node("1.17.5"))
    assert gated.runs and any("not with plain --gpus" in note for note in gated.notes)


def test_an_image_that_needs_no_compat_libraries_ignores_the_toolkit(cell: Callable[[str, str], Cell]) -> None:
    wheels = cell("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime")
    node = Node("535.104.05", (Gpu("H100", "sm_90", "nvidia"),), True, "given", toolkit="1.17.4")
    judged = verdict(wheels, node)
    assert judged.runs and not any("toolkit" in note for note in judged.notes)


def test_a_refused_requirement_says_cdi_checks_nothing(cell: Callable[[str, str], Cell]) -> None:
    base = cell(*FORWARD_CELL)  # a GeForce on R418: not admitted by nvidia/cuda 11.0.3's NVIDIA_REQUIRE_CUDA
    node = Node("418.87.01", (Gpu("GTX 1080", "sm_61", "geforce"),), True, "given")
    [reason] = verdict(base, node).reasons
    assert "refuses to start it" in reason and toolkit.NOT_CHECKED_ON_CDI in reason


def test_the_toolkit_flag_is_checked_and_overrides_the_probe() -> None:
    probed = _node("1.17.3")
    assert node_from_flags(None, None, lambda: probed, kit="1.17.8").toolkit == "1.17.8"
    assert node_from_flags(None, None, lambda: probed).toolkit == "1.17.3"
    assert node_from_flags("sm_80", "470.82.01", lambda: probed, kit="1.17.4").toolkit == "1.17.4"
    with pytest.raises(InputError) as caught:
        node_from_flags("sm_80", "470.82.01", lambda: probed, kit="v1.17")
    [problem] = caught.value.problems
    assert problem.where == "--toolkit" and "'v1.17' is not a toolkit version" in problem.message


def _cli(outputs: dict[str, tuple[int, str]]) -> Runner:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        code, out = outputs.get(argv[0], (127, ""))
        return subprocess.CompletedProcess(argv, code, out, "")

    return Runner(run=run)


def test_the_version_is_read_from_the_toolkits_own_clis() -> None:
    ctk = "NVIDIA Container Toolkit CLI version 1.17.4\ncommit: 9b69590c7428470a72f2ae05f826412976af1395\n"
    cli = "cli-version: 1.16.2\nlib-version: 1.16.2\nbuild date: 2024-09-24T20:45+00:00\n"
    assert probe_toolkit(_cli({"nvidia-ctk": (0, ctk), "nvidia-container-cli": (0, cli)})) == "1.17.4"
    assert probe_toolkit(_cli({"nvidia-container-cli": (0, cli)})) == "1.16.2"
    assert probe_toolkit(_cli({})) is None


def test_an_sm_80_or_sm_90_gpu_of_unknown_brand_is_judged_data_center(cell: Callable[[str, str], Cell]) -> None:
    """Only data-center GPUs are sm_80 (A100, A30) or sm_90 (H100, H200): https://developer.nvidia.com/cuda-gpus."""
    forward = cell("tensorflow", "cuda11.8-tf2.13.1-py3.10-runtime")  # R470 data-center: forward compatibility
    a100 = verdict(forward, Node("470.82.01", (Gpu("GPU 0", "sm_80"),), True, "given"))
    assert a100.runs and a100.runs_through == compat.FORWARD_COMPAT
    assert not any("brand is not known" in note for note in a100.notes)
    rtx = verdict(forward, Node("470.82.01", (Gpu("GPU 0", "sm_86"),), True, "given"))
    assert not rtx.runs and any("brand is not known" in note for note in rtx.notes)
