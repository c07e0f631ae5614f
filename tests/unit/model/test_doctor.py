"""The GPU-node doctor: a table of verdicts for real cells on known nodes (GPU, brand, driver), verdicts for every
cell of the unit tests' matrix, the JSON shape, flag parsing, and the probe against canned nvidia-smi and docker
output (no GPU, no Docker).

The cells come from conftest.py's `expansion`; these tests hold for any matrix that has the cells
`test_the_matrix_has_the_cells_these_tests_reason_about` names (the real one and the fixture both do).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.gpu.probe import probe_container_runtime, probe_host
from dlimages.model import compat, toolkit
from dlimages.model.cells import Cell, Expansion
from dlimages.model.doctor import (
    NO_DRIVER,
    NO_GPU,
    RUNTIME_MISSING,
    ZSTD_NOTE,
    admitted_branches,
    kernels_for,
    report,
    verdict,
)
from dlimages.model.doctor_text import describe_node, format_report
from dlimages.model.gpunode import (
    Gpu,
    Node,
    brand_from_name,
    node_from_flags,
    parse_arch,
    parse_brand,
    parse_driver,
)

H100 = Node("535.104.05", (Gpu("NVIDIA H100 80GB HBM3", "sm_90", "nvidia"),) * 2, True, "given")
H200 = Node("535.104.05", (Gpu("NVIDIA H200", "sm_90", "nvidia"),), True, "given")
V100 = Node("450.80.02", (Gpu("Tesla V100-SXM2-32GB", "sm_70", "tesla"),), True, "given")
A10 = Node("470.82.01", (Gpu("NVIDIA A10", "sm_86", "nvidia"),), True, "given")


@pytest.fixture(scope="module")
def cells(expansion: Expansion) -> tuple[Cell, ...]:
    return expansion.cells


@pytest.fixture(scope="module")
def cell_for(cells: tuple[Cell, ...]) -> Callable[..., Cell]:
    """cell_for(framework, cuda, source=None): the first cell with this framework and CUDA (and CUDA source)."""

    def _first(framework: str, cuda: str, *, source: str | None = None) -> Cell:
        return next(c for c in cells if c.framework == framework and c.cuda == cuda and source in (None, c.cuda_source))

    return _first


@pytest.fixture(scope="module")
def cell_by_slug(cells: tuple[Cell, ...]) -> Callable[[str], Cell]:
    by_slug = {c.slug: c for c in cells}
    return by_slug.__getitem__


def test_the_matrix_has_the_cells_these_tests_reason_about(cells: tuple[Cell, ...]) -> None:
    assert {(c.framework, c.cuda) for c in cells} >= {
        ("pytorch", "11.0"),
        ("pytorch", "11.8"),
        ("pytorch", "12.1"),
        ("tensorflow", "11.0"),
        ("tensorflow", "11.8"),
    }
    assert {c.cuda_source for c in cells if c.framework == "tensorflow" and c.cuda == "11.8"} == {"base", "wheel"}


# --- parsing flags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "arch"),
    [
        ("sm_90", "sm_90"),
        ("9.0", "sm_90"),
        ("90", "sm_90"),
        ("SM_86", "sm_86"),
        (" 8.6 ", "sm_86"),
        ("7.5", "sm_75"),
        ("sm_100", "sm_100"),
        ("10.0", "sm_100"),
        ("120", "sm_120"),
    ],
)
def test_parse_arch_accepts_sm_dotted_and_bare_forms(text: str, arch: str) -> None:
    assert parse_arch(text) == arch


@pytest.mark.parametrize("text", ["compute_90", "sm90", "9", "", "hopper", "sm_90a", "0.9", "9.0.1", "sm_9"])
def test_parse_arch_refuses_anything_else_on_the_gpu_flag(text: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_arch(text)
    (problem,) = raised.value.problems
    assert problem.where == "--gpu"
    assert problem.message == f"{text!r} is no GPU model or architecture"
    assert problem.allowed == "A100, H100, H20, L40S, B200, GB200, RTX 4090; sm_90"


@pytest.mark.parametrize("text", ["535.104.05", "535.104", "450.80.02", "1050.10.01", " 525.60.13\n"])
def test_parse_driver_accepts_dotted_driver_versions(text: str) -> None:
    assert parse_driver(text) == text.strip()


@pytest.mark.parametrize("text", ["535", "r535", "535.104.05.1", "12.1", "latest", "", "535.x"])
def test_parse_driver_refuses_anything_else_on_the_driver_flag(text: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_driver(text)
    (problem,) = raised.value.problems
    assert problem.where == "--driver"
    assert "is not an NVIDIA driver version" in problem.message


def _no_probe() -> Node:
    raise AssertionError("the probe must not run when flags describe the node")


def test_node_from_flags_without_flags_probes_this_host() -> None:
    assert node_from_flags(None, None, lambda: H100) is H100


def test_node_from_flags_builds_a_given_node_from_both_flags() -> None:
    node = node_from_flags("sm_80, 9.0", "535.104.05", _no_probe)
    assert node == Node("535.104.05", (Gpu("GPU 0", "sm_80"), Gpu("GPU 1", "sm_90")), None, "given")


@pytest.mark.parametrize(("gpu", "driver", "missing"), [("sm_90", None, "--driver"), (None, "535.104.05", "--gpu")])
def test_node_from_flags_names_the_missing_flag(gpu: str | None, driver: str | None, missing: str) -> None:
    with pytest.raises(InputError) as raised:
        node_from_flags(gpu, driver, _no_probe)
    assert [p.where for p in raised.value.problems] == [missing]


def test_node_from_flags_gives_every_gpu_the_brand_or_one_each() -> None:
    node = node_from_flags("sm_80,sm_86", "470.82.01", _no_probe, "geforcertx")
    assert [g.brand for g in node.gpus] == ["geforcertx", "geforcertx"]
    assert [g.brand for g in node_from_flags("8.0,8.6", "470.82.01", _no_probe, "nvidia,quadro").gpus] == [
        "nvidia",
        "quadro",
    ]
    with pytest.raises(InputError) as raised:
        node_from_flags("sm_80,sm_86,sm_90", "470.82.01", _no_probe, "tesla,geforce")
    assert [str(p) for p in raised.value.problems] == [
        "--brand: gives 2 brands for 3 GPUs (allowed: one brand, or one per GPU)"
    ]


@pytest.mark.parametrize(
    ("given", "driver", "used"), [("nvidia", "450.80.02", "tesla"), ("tesla", "535.104.05", "nvidia")]
)
def test_a_data_center_brand_is_named_as_nvml_names_it_on_that_driver(given: str, driver: str, used: str) -> None:
    assert node_from_flags("sm_80", driver, _no_probe, given).gpus[0].brand == used


def test_brand_alone_replaces_the_brand_this_host_s_probe_read() -> None:
    host = Node("535.104.05", (Gpu("Mystery GPU", "sm_89"),), True, "this host")
    node = node_from_flags(None, None, lambda: host, "GeForceRTX")
    assert node == Node("535.104.05", (Gpu("Mystery GPU", "sm_89", "geforcertx"),), True, "this host")


@pytest.mark.parametrize("text", ["datacenter", "tesla,", "a100", ""])
def test_parse_brand_refuses_names_the_toolkit_does_not_know(text: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_brand(text)
    problem = raised.value.problems[0]
    assert problem.where == "--brand"
    assert problem.message.endswith("is not a GPU brand the NVIDIA container toolkit knows")
    assert problem.allowed.startswith("tesla or nvidia (data-center GPUs), or unknown, quadro, nvs, grid, geforce")


def test_parse_brand_takes_nvidia_s_names_in_any_case() -> None:
    assert parse_brand("Tesla, GeForceRTX") == ("tesla", "geforcertx")


def test_admitted_branches_reads_a_base_s_requirement_for_people(cell_by_slug: Callable[[str], Cell]) -> None:
    assert admitted_branches(cell_by_slug("cuda11.8-tf2.13.1-py3.10-runtime").driver.require_cuda) == (
        "470 (any brand)"
    )
    assert admitted_branches("cuda>=11.0 brand=tesla,driver>=418,driver<419") == "418 (tesla)"
    assert admitted_branches("cuda>=11.8 driver>=450.80.2") == ""


def test_node_from_flags_reports_every_bad_value_at_once() -> None:
    with pytest.raises(InputError) as raised:
        node_from_flags("sm_90,hopper,compute_80", "r999", _no_probe)  # a branch model/branches does not hold
    assert [p.where for p in raised.value.problems] == ["--gpu", "--gpu", "--driver"]


# --- kernels ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framework", "cuda", "arch", "expected"),
    [
        ("pytorch", "11.0", "sm_80", "sass sm_80"),
        ("pytorch", "11.0", "sm_86", "sass sm_80"),  # same major, higher minor: the sm_80 cubin runs
        ("pytorch", "11.0", "sm_90", None),  # no sm_90 cubin and no PTX
        ("pytorch", "12.1", "sm_89", "sass sm_86"),
        ("pytorch", "11.0", "sm_100", None),  # a new major: neither a cubin nor PTX runs
        ("pytorch", "11.8", "sm_89", "sass sm_86"),
        ("pytorch", "11.8", "sm_90", "sass sm_90"),
        ("pytorch", "12.1", "sm_37", None),  # CUDA 12 dropped Kepler
        ("pytorch", "12.1", "sm_61", "sass sm_60"),
        ("tensorflow", "11.8", "sm_75", "sass sm_75"),
        ("tensorflow", "11.8", "sm_37", "sass sm_35"),
        ("tensorflow", "11.8", "sm_80", "ptx compute_80 (JIT)"),
        ("tensorflow", "11.0", "sm_90", "ptx compute_80 (JIT)"),
        ("tensorflow", "11.8", "sm_100", "ptx compute_80 (JIT)"),
    ],
)
def test_kernels_for(cell_for: Callable[..., Cell], framework: str, cuda: str, arch: str, expected: str | None) -> None:
    assert kernels_for(cell_for(framework, cuda), arch) == expected


# --- the verdict table: (GPU, brand, driver) -> how each real cell runs, or why not ----------------------------
#
# The cells are the real ones (the fixture carries the real matrix's facts for them; test_compat_drivers.py checks
# their driver rules against matrix.yaml). Each row: arch, brand (None: not known), driver, cell slug, then how it
# runs (compat's TOOLKIT/MINOR/FORWARD) or None, and for None the text its reason starts with and the driver needed.

TOOLKIT, MINOR, FORWARD = compat.TOOLKIT_DRIVER, compat.MINOR_VERSION, compat.FORWARD_COMPAT
TORCH_110 = "cuda11.0-torch1.7.1-py3.8-runtime"
TORCH_118 = "cuda11.8-torch2.1.2-py3.10-runtime"
TORCH_121 = "cuda12.1-torch2.1.2-py3.10-runtime"
TF_244 = "cuda11.0-tf2.4.4-py3.8-runtime"  # nvidia/cuda 11.0.3 base: forward compatibility on Tesla R418
TF_2131 = "cuda11.8-tf2.13.1-py3.10-runtime"  # nvidia/cuda 11.8.0 base: on data-center R470 (R450 gone: 684356f0)
TF_2141 = "cuda11.8-tf2.14.1-py3.10-runtime"  # CUDA from PyPI wheels; compute_80 PTX for sm_80 and newer

TABLE = [
    # An RTX 3090 on 520.56.06, an R520 driver older than CUDA 11.8's listed 520.61.05: it reports CUDA 11.8 (its
    # branch's), so the toolkit's `cuda>=11.8` holds and the base's image runs on its own driver (issue 19 item 6).
    ("sm_86", "geforcertx", "520.56.06", TF_2131, TOOLKIT, None, None),
    ("sm_86", "geforcertx", "520.56.06", TORCH_118, TOOLKIT, None, None),
    # An A10 (sm_86) on 470.82.01, the R470 data-center branch: NVML names it NVIDIA there.
    ("sm_86", "nvidia", "470.82.01", TORCH_110, TOOLKIT, None, None),
    ("sm_86", "nvidia", "470.82.01", TORCH_118, MINOR, None, None),
    ("sm_86", "nvidia", "470.82.01", TORCH_121, None, "driver 470.82.01 is older than 525.60.13", "525.60.13"),
    ("sm_86", "nvidia", "470.82.01", TF_244, TOOLKIT, None, None),
    ("sm_86", "nvidia", "470.82.01", TF_2131, FORWARD, None, None),
    ("sm_86", "nvidia", "470.82.01", TF_2141, MINOR, None, None),  # its ISA 7.1 PTX: JIT from 455.23.05
    # The same driver on a GeForce RTX 3090 (sm_86): the base's cuda-compat does not run there.
    ("sm_86", "geforcertx", "470.82.01", TORCH_118, MINOR, None, None),
    (
        "sm_86",
        "geforcertx",
        "470.82.01",
        TF_2131,
        None,
        "driver 470.82.01 is below CUDA 11.8's own 520.61.05; the "
        "image admits geforcertx GPUs on branch 470, but there the container toolkit loads",
        "520.61.05",
    ),
    # Brand not known: judged as not data-center (the note says what a data-center GPU would do).
    (
        "sm_86",
        None,
        "470.82.01",
        TF_2131,
        None,
        "driver 470.82.01 is below CUDA 11.8's own 520.61.05; the image admits non-data-center GPUs on branch 470",
        "520.61.05",
    ),
    ("sm_86", None, "470.82.01", TORCH_118, MINOR, None, None),
    # An A100 (sm_80) on 450.80.02, the R450 data-center branch, where NVML still names it Tesla.
    ("sm_80", "tesla", "450.80.02", TORCH_110, TOOLKIT, None, None),
    ("sm_80", "tesla", "450.80.02", TORCH_118, MINOR, None, None),
    (
        "sm_80",
        "tesla",
        "450.80.02",
        TORCH_121,
        None,
        "driver 450.80.02 is older than 525.60.13, the oldest that can "
        "run CUDA 12.1 even under minor-version compatibility (this image has no cuda-compat package",
        "525.60.13",
    ),
    ("sm_80", "tesla", "450.80.02", TF_244, TOOLKIT, None, None),
    # NVIDIA's 11.8 bases admit no R450 since 684356f0 (2023-11-08): `docker run --gpus` refuses them there.
    ("sm_80", "tesla", "450.80.02", TF_2131, None, "driver 450.80.02 is below CUDA 11.8's own 520.61.05", "520.61.05"),
    (
        "sm_80",
        "tesla",
        "450.80.02",
        TF_2141,
        None,
        "sm_80 (GPU 0, tesla) runs ptx compute_80 (JIT), whose PTX this driver cannot JIT-compile",
        "455.23.05",
    ),
    # A T4 (sm_75) on 418.87.01: only the CUDA 11.0 base admits Tesla R418.
    ("sm_75", "tesla", "418.87.01", TF_244, FORWARD, None, None),  # the T4 example
    (
        "sm_75",
        "tesla",
        "418.87.01",
        TORCH_110,
        None,
        "driver 418.87.01 is older than 450.51.06, the driver CUDA 11.0 needs (this image has no cuda-compat package",
        "450.51.06",
    ),
    ("sm_75", "tesla", "418.87.01", TORCH_118, None, "driver 418.87.01 is older than 450.80.02", "450.80.02"),
    (
        "sm_75",
        "tesla",
        "418.87.01",
        TF_2131,
        None,
        "driver 418.87.01 is below CUDA 11.8's own 520.61.05, and the "
        "image's NVIDIA_REQUIRE_CUDA (nvidia/cuda's) admits older drivers only on branch 470 (any "
        "brand): the NVIDIA container toolkit refuses to start it",
        "520.61.05",
    ),
    (
        "sm_75",
        "geforce",
        "418.87.01",
        TF_244,
        None,
        "driver 418.87.01 is below CUDA 11.0's own 450.51.06, and the "
        "image's NVIDIA_REQUIRE_CUDA (nvidia/cuda's) admits older drivers only on branch 418 (tesla)",
        "450.51.06",
    ),
    # An RTX 4090 (sm_89) on 525.60.13: CUDA 12.1 wheels through minor-version compatibility.
    ("sm_89", "geforcertx", "525.60.13", TORCH_121, MINOR, None, None),
    ("sm_89", "geforcertx", "525.60.13", TORCH_118, TOOLKIT, None, None),
    ("sm_89", "geforcertx", "525.60.13", TF_2131, TOOLKIT, None, None),
    ("sm_89", "geforcertx", "525.60.13", TF_2141, TOOLKIT, None, None),  # PTX JIT from the toolkit driver
    # An H100 (sm_90) on 535.104.05 and an H200 on 580: every driver part runs with the toolkit driver.
    ("sm_90", "nvidia", "535.104.05", TORCH_121, TOOLKIT, None, None),
    ("sm_90", "nvidia", "535.104.05", TORCH_110, None, "no kernels for sm_90 (GPU 0) in this build", None),
    ("sm_90", "nvidia", "535.104.05", TF_244, TOOLKIT, None, None),
    ("sm_90", "nvidia", "580.65.06", TORCH_118, TOOLKIT, None, None),
    ("sm_90", "nvidia", "580.65.06", TF_2131, TOOLKIT, None, None),
    ("sm_90", "nvidia", "580.159.04", TF_2141, TOOLKIT, None, None),
    ("sm_90", "nvidia", "580.159.04", TORCH_110, None, "no kernels for sm_90 (GPU 0) in this build", None),
]


@pytest.mark.parametrize(
    ("arch", "brand", "driver", "slug", "through", "reason", "needs"),
    TABLE,
    ids=[f"{row[0]}-{row[1]}-{row[2]}-{row[3]}" for row in TABLE],
)
def test_verdict_table(
    cell_by_slug: Callable[[str], Cell],
    arch: str,
    brand: str | None,
    driver: str,
    slug: str,
    through: str | None,
    reason: str | None,
    needs: str | None,
) -> None:
    judged = verdict(cell_by_slug(slug), Node(driver, (Gpu("GPU 0", arch, brand),), True, "given"))
    assert judged.runs is (through is not None), judged.reasons
    assert judged.runs_through == through
    assert judged.needs_driver == needs
    if reason is None:
        assert judged.reasons == ()
    else:
        (only,) = judged.reasons
        assert only.startswith(reason), only
        if needs is not None:
            assert only.endswith(f"; needs driver >= {needs}")


def test_minor_version_compatibility_states_its_condition(cell_by_slug: Callable[[str], Cell]) -> None:
    judged = verdict(cell_by_slug(TORCH_118), Node("470.82.01", (Gpu("A10", "sm_86", "nvidia"),), True, "given"))
    (note,) = judged.notes
    assert note == (
        "minor-version compatibility on sm_86 (A10, nvidia): driver 470.82.01 is below CUDA 11.8's own 520.61.05 "
        "but at least 450.80.02, and the build has machine code for this GPU (sass sm_86): no PTX JIT needed; CUDA "
        "features newer than the driver are unavailable"
    )


def test_forward_compatibility_says_why_only_data_center_gpus(cell_by_slug: Callable[[str], Cell]) -> None:
    judged = verdict(cell_by_slug(TF_244), Node("418.87.01", (Gpu("Tesla T4", "sm_75", "tesla"),), True, "given"))
    assert judged.notes == (
        toolkit.UNKNOWN,  # whether the container toolkit loads the compat libraries: by its version
        "forward compatibility on sm_75 (Tesla T4, tesla): driver 418.87.01 is below CUDA 11.0's own 450.51.06; the "
        "image admits tesla GPUs on branch 418, where CUDA runs on the base's cuda-compat (450) libraries if the "
        "container toolkit loads them; they run on data-center GPUs only (other brands fail with CUDA error 804)",
    )
    geforce = verdict(cell_by_slug(TF_2131), Node("470.82.01", (Gpu("RTX", "sm_86", "geforce"),), True, "given"))
    (reason,) = geforce.reasons
    assert "CUDA fails with error 804 (forward compatibility was attempted on non supported HW)" in reason


def test_an_unknown_brand_is_judged_not_data_center_and_says_what_data_center_would_do(
    cell_by_slug: Callable[[str], Cell],
) -> None:
    judged = verdict(cell_by_slug(TF_244), Node("418.87.01", (Gpu("GPU 0", "sm_75"),), None, "given"))
    assert not judged.runs
    assert judged.notes == (
        "GPU 0's brand is not known, so it is judged as a GPU that is not data-center; on a data-center GPU "
        "(--brand tesla or nvidia) it runs through forward compatibility",
        "container runtime not checked",
    )
    # Where the brand changes nothing, nothing is said about it.
    same = verdict(cell_by_slug(TORCH_118), Node("470.82.01", (Gpu("GPU 0", "sm_86"),), None, "given"))
    assert not any("brand is not known" in note for note in same.notes)


def test_ptx_jit_is_a_note_on_the_first_start_where_the_driver_runs_it(cell_by_slug: Callable[[str], Cell]) -> None:
    judged = verdict(cell_by_slug(TF_2131), Node("470.82.01", (Gpu("A100", "sm_80", "tesla"),), True, "given"))
    assert judged.runs_through == FORWARD
    assert (
        "sm_80 (A100) runs ptx compute_80 (JIT): the driver compiles kernels on first use, so the first start is "
        "slow (minutes; cached after)"
    ) in judged.notes


def test_a_mixed_node_runs_through_the_most_conditional_way_and_fails_on_any_gpu(
    cell_by_slug: Callable[[str], Cell],
) -> None:
    gpus = (Gpu("A", "sm_86", "nvidia"), Gpu("B", "sm_75", "nvidia"))
    assert verdict(cell_by_slug(TF_2131), Node("470.82.01", gpus, True, "given")).runs_through == FORWARD
    mixed = (Gpu("A", "sm_86", "nvidia"), Gpu("B", "sm_86", "geforce"))
    judged = verdict(cell_by_slug(TF_2131), Node("470.82.01", mixed, True, "given"))
    assert not judged.runs and judged.runs_through is None
    assert len(judged.reasons) == 1 and "on sm_86 (B, geforce) CUDA fails with error 804" in judged.reasons[0]


@pytest.mark.parametrize("node", [H100, H200], ids=["h100", "h200"])
def test_hopper_with_535_runs_everything_but_pytorch_builds_without_sm_90(node: Node, cells: tuple[Cell, ...]) -> None:
    assert any(c.framework == "pytorch" and "sm_90" not in c.arch_sass for c in cells)
    for c in cells:
        judged = verdict(c, node)
        if c.framework == "pytorch" and "sm_90" not in c.arch_sass:
            assert not judged.runs, c.slug
            assert len(judged.reasons) == 1
            assert judged.reasons[0].startswith(f"no kernels for sm_90 ({node.gpus[0].name}) in this build: it has ")
            assert "sm_80" in judged.reasons[0]
        else:
            assert judged.runs, (c.slug, judged.reasons)
            assert judged.reasons == ()
            assert judged.runs_through == TOOLKIT
        jit = [n for n in judged.notes if "ptx compute_80 (JIT)" in n]
        assert bool(jit) == (c.framework == "tensorflow"), c.slug
        if jit:
            assert "first start is slow" in jit[0]


def test_v100_with_450_runs_cuda_11_through_minor_version_and_the_11_0_base(cells: tuple[Cell, ...]) -> None:
    for c in cells:
        judged = verdict(c, V100)
        # sm_70 cubins are in every build: the GPU is never the problem, only CUDA 12.1's floor is, and the 11.8
        # base, which admits no R450 since NVIDIA's 684356f0.
        base_118 = c.cuda == "11.8" and c.cuda_source == "base"
        assert judged.runs == (c.cuda != "12.1" and not base_118), (c.slug, judged.reasons)
        if base_118:
            assert "admits older drivers only on branch 470 (any brand)" in judged.reasons[0]
        elif c.cuda == "12.1":
            assert judged.reasons[0].startswith(
                "driver 450.80.02 is older than 525.60.13, the oldest that can run CUDA 12.1 even under "
                "minor-version compatibility"
            )
        elif c.cuda == "11.0":
            assert judged.runs_through == TOOLKIT
        else:
            assert judged.runs_through == MINOR, c.slug


def test_no_driver_is_the_only_reason_when_nvidia_smi_found_nothing(cells: tuple[Cell, ...]) -> None:
    node = Node(None, (), None, "this host")
    for c in cells:
        judged = verdict(c, node)
        assert not judged.runs
        assert judged.reasons == (NO_DRIVER,)


def test_a_driver_without_gpus_says_no_gpu_is_visible(cell_for: Callable[..., Cell]) -> None:
    judged = verdict(cell_for("pytorch", "11.8"), Node("535.104.05", (), True, "given"))
    assert judged.reasons == (NO_GPU,)


def test_unknown_compute_capability_is_a_reason(cell_for: Callable[..., Cell]) -> None:
    judged = verdict(cell_for("pytorch", "11.8"), Node("535.104.05", (Gpu("NVIDIA A100", None),), True, "this host"))
    assert not judged.runs
    (reason,) = judged.reasons
    assert reason.startswith("compute capability unknown for NVIDIA A100")


def test_every_gpu_is_judged_and_each_missing_arch_named_once(cell_for: Callable[..., Cell]) -> None:
    node = Node("535.104.05", (Gpu("A", "sm_80"), Gpu("B", "sm_90"), Gpu("C", "sm_90")), True, "given")
    judged = verdict(cell_for("pytorch", "11.0"), node)
    assert [r.split(" in this build")[0] for r in judged.reasons] == [
        "no kernels for sm_90 (B)",
        "no kernels for sm_90 (C)",
    ]


def test_container_runtime_missing_is_a_reason_and_unchecked_a_note(cell_for: Callable[..., Cell]) -> None:
    c = cell_for("pytorch", "12.1")
    missing = verdict(c, Node("535.104.05", (Gpu("H100", "sm_90"),), False, "this host"))
    assert missing.reasons == (RUNTIME_MISSING,)
    assert "no nvidia runtime in `docker info`" in RUNTIME_MISSING and "no CDI spec" in RUNTIME_MISSING
    unchecked = verdict(c, Node("535.104.05", (Gpu("H100", "sm_90"),), None, "given"))
    assert unchecked.runs
    assert unchecked.notes == ("container runtime not checked",)


# --- JSON and text ------------------------------------------------------------------------------------------


def test_report_is_the_matrix_json_plus_the_verdict(cells: tuple[Cell, ...]) -> None:
    rows = report(cells, A10)
    assert len(rows) == len(cells)
    for c, row in zip(cells, rows, strict=True):
        expected = c.as_json()
        assert {k: row[k] for k in expected} == expected
        assert set(row) == {
            *expected,
            "runs",
            "runs_through",
            "reasons",
            "needs_driver",
            "run_notes",
            "condition",
            "sources",
        }
        runs_as = str(row["runs_through"]).replace(" ", "-")
        assert row["condition"] == runs_as if row["runs"] else not str(row["condition"]).endswith("compatibility")
        assert all(
            url.startswith("http") and url in " ".join([*row["reasons"], *row["run_notes"]]) for url in row["sources"]
        )
        assert isinstance(row["runs"], bool)
        reasons, notes = row["reasons"], row["run_notes"]
        assert isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)
        assert isinstance(notes, list) and all(isinstance(n, str) for n in notes)
        assert (reasons == []) == row["runs"]
        assert (row["runs_through"] is not None) == row["runs"]
        assert row["runs_through"] in (None, *compat_paths())
        assert row["needs_driver"] is None or isinstance(row["needs_driver"], str)
    assert {row["runs_through"] for row in rows} == {None, *compat_paths()}  # an A10 on 470 sees all three ways
    assert json.loads(json.dumps(rows)) == rows


def compat_paths() -> tuple[str, ...]:
    return (compat.TOOLKIT_DRIVER, compat.MINOR_VERSION, compat.FORWARD_COMPAT)


def test_format_report_shows_the_node_then_each_image_with_its_reasons(
    cells: tuple[Cell, ...], cell_for: Callable[..., Cell]
) -> None:
    node = node_from_flags("sm_90", "535.104.05", _no_probe)
    text = format_report(report(cells, node), node)
    lines = text.splitlines()
    assert lines[0] == (
        "node (given): driver 535.104.05; GPUs: GPU 0 (sm_90, brand unknown); NVIDIA container runtime: not checked; "
        "container toolkit version not known"
    )
    # The note every image shares is said once, not once per image.
    assert lines[1] == "  every image, note: container runtime not checked"
    assert text.count("note: container runtime not checked") == 1
    runs = sum(1 for c in cells if verdict(c, node).runs)
    assert lines[2] == f"{runs} of {len(cells)} images run on this node."
    old = cell_for("pytorch", "11.0")
    index = lines.index(f"NO    {old.image}:{old.immutable_tag}")
    assert lines[index + 1].startswith("        - no kernels for sm_90 (GPU 0) in this build")
    new = cell_for("pytorch", "12.1")
    assert f"RUNS  {new.image}:{new.immutable_tag}" in lines


def test_format_report_groups_identical_gpus(cells: tuple[Cell, ...]) -> None:
    assert format_report(report(cells[:1], H100), H100).splitlines()[0] == (
        "node (given): driver 535.104.05; GPUs: 2x NVIDIA H100 80GB HBM3 (sm_90, nvidia); NVIDIA container runtime: "
        "configured; container toolkit version not known"
    )


def test_format_report_counts_the_images_that_run_through_compatibility(cells: tuple[Cell, ...]) -> None:
    lines = format_report(report(cells, A10), A10).splitlines()
    judged = [verdict(c, A10) for c in cells]
    minor = sum(1 for v in judged if v.runs_through == compat.MINOR_VERSION)
    forward = sum(1 for v in judged if v.runs_through == compat.FORWARD_COMPAT)
    assert minor and forward
    runs = sum(1 for v in judged if v.runs)
    assert lines[1] == (
        f"{runs} of {len(cells)} images run on this node ({minor} through minor-version compatibility, "
        f"{forward} through forward compatibility)."
    )
    tf = next(c for c in cells if c.slug == "cuda11.8-tf2.13.1-py3.10-runtime")
    assert f"RUNS  {tf.image}:{tf.immutable_tag}  [forward compatibility]" in lines


# --- probing with canned output --------------------------------------------------------------------------


class FakeRun:
    """Stands in for subprocess.run: answers by the command's first words, records every call."""

    def __init__(self, answers: dict[tuple[str, ...], subprocess.CompletedProcess[str] | BaseException]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], dict[str, object]]] = []

    def __call__(self, argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), kwargs))
        for prefix, answer in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                if isinstance(answer, BaseException):
                    raise answer
                return answer
        raise FileNotFoundError(argv[0])


def done(stdout: str, returncode: int = 0, stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], returncode, stdout, stderr)


SMI_NEW = ("nvidia-smi", "--format=csv,noheader", "--query-gpu=name,compute_cap,driver_version")
SMI_OLD = ("nvidia-smi", "--format=csv,noheader", "--query-gpu=name,driver_version")
DOCKER = ("docker", "info", "--format", "{{json .Runtimes}}")
RUNTIMES_WITH_NVIDIA = (
    '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}\n'
)
RUNTIMES_PLAIN = '{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}\n'


def no_hook(_: str) -> str | None:
    return None


def probe(
    run: FakeRun,
    tmp_path: Path,
    nvml: Callable[[], list[tuple[int, int]] | None] = lambda: None,
    brands: Callable[[], list[str] | None] = lambda: None,
) -> Node:
    return probe_host(Runner(run), nvml_capabilities=nvml, nvml_brands=brands, cdi_dirs=[tmp_path], which=no_hook)


def test_probe_reads_gpus_archs_and_driver_from_nvidia_smi(tmp_path: Path) -> None:
    run = FakeRun(
        {
            SMI_NEW: done("NVIDIA H100 80GB HBM3, 9.0, 535.104.05\nNVIDIA H100 80GB HBM3, 9.0, 535.104.05\n"),
            DOCKER: done(RUNTIMES_WITH_NVIDIA),
        }
    )
    node = probe(run, tmp_path)
    # No pynvml: the brand comes from the name, as NVML names data-center GPUs on this driver.
    cpu = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    gpus = (Gpu("NVIDIA H100 80GB HBM3", "sm_90", "nvidia"),) * 2
    assert node == Node("535.104.05", gpus, True, "this host", cpu=cpu)
    assert all(isinstance(kwargs.get("timeout"), (int, float)) for _, kwargs in run.calls)
    assert all(kwargs.get("capture_output") is True for _, kwargs in run.calls)


def test_probe_falls_back_to_nvml_when_nvidia_smi_has_no_compute_cap(tmp_path: Path) -> None:
    run = FakeRun(
        {
            SMI_NEW: done("", 2, 'Field "compute_cap" is not a valid field to query.'),
            SMI_OLD: done("Tesla V100-SXM2-32GB, 450.80.02\nNVIDIA A10, 450.80.02\n"),
            DOCKER: done(RUNTIMES_PLAIN),
        }
    )
    node = probe(run, tmp_path, nvml=lambda: [(7, 0), (8, 6)])
    assert node.driver == "450.80.02"
    assert node.gpus == (Gpu("Tesla V100-SXM2-32GB", "sm_70", "tesla"), Gpu("NVIDIA A10", "sm_86", "tesla"))
    assert node.container_runtime is False


def test_probe_reads_brands_from_nvml_when_pynvml_is_there(tmp_path: Path) -> None:
    run = FakeRun(
        {SMI_NEW: done("NVIDIA H200, 9.0, 580.159.04\nNVIDIA RTX A6000, 8.6, 580.159.04\n"), DOCKER: done("")}
    )
    node = probe(run, tmp_path, brands=lambda: ["nvidia", "nvidiartx"])
    assert node.gpus == (Gpu("NVIDIA H200", "sm_90", "nvidia"), Gpu("NVIDIA RTX A6000", "sm_86", "nvidiartx"))
    # NVML answering for fewer GPUs than nvidia-smi lists is no answer: the names decide.
    fewer = probe(run, tmp_path, brands=lambda: ["tesla"])
    assert [g.brand for g in fewer.gpus] == ["nvidia", "nvidiartx"]


@pytest.mark.parametrize(
    ("name", "driver", "brand"),
    [
        ("NVIDIA GeForce RTX 4090", "535.104.05", "geforcertx"),
        ("GeForce GTX 1080 Ti", "460.80", "geforce"),
        ("NVIDIA TITAN RTX", "535.104.05", "titanrtx"),
        ("TITAN V", "470.82.01", "titan"),
        ("Quadro RTX 8000", "470.82.01", "quadrortx"),
        ("Quadro P6000", "470.82.01", "quadro"),
        ("NVIDIA RTX A6000", "535.104.05", "nvidiartx"),
        ("NVIDIA RTX 6000 Ada Generation", "535.104.05", "nvidiartx"),
        ("Tesla T4", "418.87.01", "tesla"),
        ("Tesla T4", "530.30.02", "nvidia"),  # NVML says NVIDIA for a T4 on 530.30.02
        ("NVIDIA A100-SXM4-80GB", "450.80.02", "tesla"),
        ("NVIDIA A100-SXM4-80GB", "535.104.05", "nvidia"),
        ("NVIDIA H200", "580.159.04", "nvidia"),  # as NVML reports it on the device machine
        ("NVIDIA L4", "535.104.05", "nvidia"),
        ("NVIDIA A10G", "470.82.01", "nvidia"),
        ("NVIDIA GH200 480GB", "550.127.05", "nvidia"),
        ("Some Future GPU", "580.65.06", None),
    ],
)
def test_brand_from_name_when_nvml_is_not_there(name: str, driver: str, brand: str | None) -> None:
    assert brand_from_name(name, driver) == brand


def test_probe_without_compute_cap_or_pynvml_leaves_the_arch_unknown(
    tmp_path: Path, cell_for: Callable[..., Cell]
) -> None:
    run = FakeRun({SMI_NEW: done("", 2), SMI_OLD: done("Tesla T4, 470.57.02\n"), DOCKER: done(RUNTIMES_WITH_NVIDIA)})
    node = probe(run, tmp_path, nvml=lambda: None)
    assert node.gpus == (Gpu("Tesla T4", None, "nvidia"),)
    assert verdict(cell_for("pytorch", "11.0"), node).reasons[0].startswith("compute capability unknown for Tesla T4")


@pytest.mark.parametrize(
    "failure",
    [
        FileNotFoundError("nvidia-smi"),
        subprocess.TimeoutExpired("nvidia-smi", 20),
        done("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9),
    ],
    ids=["missing", "hanging", "failing"],
)
def test_probe_without_a_working_nvidia_smi_finds_no_driver(
    tmp_path: Path, failure: subprocess.CompletedProcess[str] | BaseException, cell_for: Callable[..., Cell]
) -> None:
    run = FakeRun({("nvidia-smi",): failure, DOCKER: done(RUNTIMES_PLAIN)})
    node = probe(run, tmp_path)
    assert (node.driver, node.gpus) == (None, ())
    assert verdict(cell_for("pytorch", "12.1"), node).reasons[0] == NO_DRIVER


def test_runtime_is_none_when_docker_is_missing_or_unreachable(tmp_path: Path) -> None:
    assert probe_container_runtime(Runner(FakeRun({})), cdi_dirs=[tmp_path], which=no_hook) is None
    unreachable = FakeRun({DOCKER: done("", 1, "Cannot connect to the Docker daemon")})
    assert probe_container_runtime(Runner(unreachable), cdi_dirs=[tmp_path], which=no_hook) is None
    hanging = FakeRun({DOCKER: subprocess.TimeoutExpired("docker", 15)})
    assert probe_container_runtime(Runner(hanging), cdi_dirs=[tmp_path], which=no_hook) is None


def test_runtime_from_docker_info(tmp_path: Path) -> None:
    with_nvidia = FakeRun({DOCKER: done(RUNTIMES_WITH_NVIDIA)})
    assert probe_container_runtime(Runner(with_nvidia), cdi_dirs=[tmp_path], which=no_hook) is True
    plain = FakeRun({DOCKER: done(RUNTIMES_PLAIN)})
    assert probe_container_runtime(Runner(plain), cdi_dirs=[tmp_path], which=no_hook) is False


def test_runtime_from_a_cdi_spec_or_the_gpus_hook(tmp_path: Path) -> None:
    plain = FakeRun({DOCKER: done(RUNTIMES_PLAIN)})
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    assert probe_container_runtime(Runner(plain), cdi_dirs=[tmp_path / "absent", tmp_path], which=no_hook) is True
    hook = "/usr/bin/nvidia-container-runtime-hook"
    found = probe_container_runtime(Runner(plain), cdi_dirs=[], which=lambda name: hook if name in hook else None)
    assert found is True


def test_nvml_is_read_per_gpu_and_shut_down_and_any_failure_means_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml is not installed here: a stand-in module with NVML's calls, two GPUs, one brand code unknown."""
    import types

    from dlimages.gpu import probe

    calls: list[str] = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, h),
        nvmlDeviceGetBrand=lambda h: (2, 999)[h],
    )
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    assert probe._nvml_capabilities() == [(9, 0), (9, 1)]
    assert probe._nvml_brands() == [compat.NVML_BRANDS[2], "unknown"]
    assert calls == ["init", "shutdown"] * 2

    def broken() -> int:
        raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    fake.nvmlDeviceGetCount = broken
    assert probe._nvml_capabilities() is None
    assert calls[-1] == "shutdown"


def test_an_engine_older_than_docker_23_is_told_it_cannot_pull_zstd_images(cells: tuple[Cell, ...]) -> None:
    old = dataclasses.replace(H200, engine="20.10.24")
    rows = report(cells, old)
    note = ZSTD_NOTE.format(engine="20.10.24")
    assert all(note in row["run_notes"] for row in rows)  # type: ignore[operator]
    assert format_report(rows, old).count(note) == 1  # said once, for every image
    assert "Docker 20.10.24" in describe_node(old)
    for engine in ("26.1.5", "23.0.0", None):
        assert not any(note in row["run_notes"] for row in report(cells, dataclasses.replace(H200, engine=engine)))  # type: ignore[operator]
