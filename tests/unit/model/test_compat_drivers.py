"""The driver rule (compat.DriverRule): how NVIDIA_REQUIRE_CUDA is read (as libnvidia-container reads it), how it
is written for wheel cells, what nvidia/cuda bases admit, and that the image's value, its labels and the rule's
verdicts agree for every cell of the unit tests' matrix.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlimages.generate.render import render_cell
from dlimages.generate.templating import environment
from dlimages.model import compat
from dlimages.model.cells import Cell, Expansion
from dlimages.model.compat import DriverRule, jit_from, wheel_require_cuda
from dlimages.model.requirecuda import require_holds, toolkit_number
from dlimages.model.spec import Matrix
from dlimages.payload import dl_stack

REPO = Path(__file__).resolve().parents[3]
CellLookup = Callable[[str, str], Cell]

# NVIDIA_REQUIRE_CUDA of nvidia/cuda:11.8.0-*-ubuntu22.04 as NVIDIA's Dockerfile sets it, verbatim:
# https://gitlab.com/nvidia/container-images/cuda/blob/master/dist/11.8.0/ubuntu2204/base/Dockerfile
# As of NVIDIA's 684356f0 (2023-11-08), which dropped the Tesla R450 clause.
NVIDIA_11_8 = (
    "cuda>=11.8 brand=tesla,driver>=470,driver<471 "
    "brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 "
    "brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 "
    "brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471"
)


# --- reading NVIDIA_REQUIRE_CUDA as the container toolkit does --------------------------------------------------


def facts(cuda: str | None = None, driver: str | None = None, brand: str | None = None, arch: str | None = None) -> Any:
    return {"cuda": cuda, "driver": driver, "brand": brand, "arch": arch}


@pytest.mark.parametrize(
    ("expression", "given", "holds"),
    [
        ("cuda>=11.8", facts(cuda="11.8"), True),
        ("cuda>=11.8", facts(cuda="11.4"), False),
        ("cuda>=11.8", facts(cuda="12.0"), True),
        # Missing parts are zero; leading zeros do not matter (dsl_compare_version).
        ("driver>=450.80", facts(driver="450.80.02"), True),
        ("driver>=450.80.2", facts(driver="450.80.02"), True),
        ("driver>=450.80.2", facts(driver="450.66.01"), False),
        ("driver<471", facts(driver="470.82.01"), True),
        ("driver<471", facts(driver="471.0"), False),
        # A space separates alternatives, a comma joins conditions.
        (NVIDIA_11_8, facts(cuda="11.4", driver="470.82.01", brand="geforce"), True),
        (NVIDIA_11_8, facts(cuda="11.0", driver="450.80.02", brand="tesla"), False),  # R450 dropped in 684356f0
        (NVIDIA_11_8, facts(cuda="11.4", driver="470.82.01", brand="tesla"), True),
        (NVIDIA_11_8, facts(cuda="11.0", driver="450.80.02", brand="nvidia"), False),
        (NVIDIA_11_8, facts(cuda="11.7", driver="515.65.01", brand="tesla"), False),
        (NVIDIA_11_8, facts(cuda="12.2", driver="535.104.05", brand="geforce"), True),
        # Brands compare without case, as NVML's "Tesla" meets NVIDIA's brand=tesla.
        ("brand=tesla", facts(brand="Tesla"), True),
        ("brand!=tesla", facts(brand="geforce"), True),
        ("arch<8.0", facts(arch="7.5"), True),
        ("arch<8.0", facts(arch="8.6"), False),
        ("arch<8.0", facts(arch="10.0"), False),
        ("cuda>=11.8 driver>=450.80.2,arch<8.0", facts(cuda="0", driver="470.82.01", arch="8.6"), False),
        ("cuda>=11.8 driver>=450.80.2,arch<8.0", facts(cuda="0", driver="470.82.01", arch="7.5"), True),
        # An unknown fact satisfies its condition, as in the toolkit (no GPU visible, no brand read).
        ("brand=tesla,driver>=418,driver<419", facts(driver="418.87.01"), True),
    ],
)
def test_require_holds_as_libnvidia_container_evaluates_it(expression: str, given: Any, holds: bool) -> None:
    assert require_holds(expression, given) is holds


def test_require_holds_refuses_conditions_the_toolkit_does_not_know() -> None:
    with pytest.raises(ValueError, match="is not an NVIDIA_REQUIRE_CUDA condition"):
        require_holds("memory>=80", facts())


# --- writing it for wheel cells ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "written"), [("450.80.02", "450.80.2"), ("525.60.13", "525.60.13"), ("450.51.06", "450.51.6")]
)
def test_driver_numbers_lose_leading_zeros_for_the_go_evaluator(driver: str, written: str) -> None:
    assert toolkit_number(driver) == written


@pytest.mark.parametrize(
    ("sass", "ptx", "bound"),
    [
        (["sm_35", "sm_50", "sm_60", "sm_70", "sm_75"], ["sm_80"], "8.0"),  # TensorFlow 2.4 to 2.14
        (["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], [], None),  # PyTorch cu118
        (["sm_80", "sm_86", "sm_90"], ["sm_90"], "10.0"),  # sm_90 cubins cover 9.x; JIT from 10.0
        (["sm_70", "sm_90"], ["sm_80"], None),  # JIT for 8.x only, cubins again from 9.0: no single bound
    ],
)
def test_jit_from_is_the_first_capability_that_needs_ptx(sass: list[str], ptx: list[str], bound: str | None) -> None:
    assert jit_from(sass, ptx) == bound


@pytest.mark.parametrize(
    ("cuda", "toolkit", "floor", "jit", "expected"),
    [
        ("11.8", "520.61.05", "450.80.02", None, "cuda>=11.8 driver>=450.80.2"),
        ("11.8", "520.61.05", "450.80.02", "8.0", "cuda>=11.8 driver>=450.80.2,arch<8.0"),
        ("12.1", "530.30.02", "525.60.13", None, "cuda>=12.1 driver>=525.60.13"),
        ("11.0", "450.51.06", "450.51.06", None, "cuda>=11.0"),  # no floor below its own driver
    ],
)
def test_wheel_require_cuda_admits_the_minor_version_floor(
    cuda: str, toolkit: str, floor: str, jit: str | None, expected: str
) -> None:
    assert wheel_require_cuda(cuda, toolkit, floor, jit) == expected


# --- the rule of each cell ----------------------------------------------------------------------------------


def test_wheel_cells_admit_the_minor_version_floor_and_have_no_forward_compatibility(cell: CellLookup) -> None:
    torch = cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime").driver
    assert torch == DriverRule("11.8", "520.61.05", "450.80.02", None, None, "cuda>=11.8 driver>=450.80.2")
    assert torch.forward_compat_branches == ()
    assert cell("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime").driver.require_cuda == "cuda>=12.1 driver>=525.60.13"
    tf = cell("tensorflow", "cuda11.8-tf2.14.1-py3.10-runtime").driver
    # Its ISA 7.1 PTX (CUDA 11.1's) is JIT-compiled from driver 455.23.05 on sm_8x; Hopper needs CUDA 11.8's driver.
    assert (tf.require_cuda, tf.jit_from, tf.jit_driver) == (
        "cuda>=11.8 driver>=450.80.2,arch<8.0 driver>=455.23.5,arch<9.0",
        "8.0",
        "455.23.05",
    )
    assert (tf.jit_by("8.6"), tf.jit_by("9.0"), tf.jit_by("7.5")) == ("455.23.05", "520.61.05", "520.61.05")
    assert cell("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime").driver.require_cuda == "cuda>=11.0"


def test_base_cells_take_nvidia_s_value_and_its_data_center_branches(cell: CellLookup) -> None:
    tf = cell("tensorflow", "cuda11.8-tf2.13.1-py3.10-runtime")
    assert tf.driver.require_cuda == NVIDIA_11_8
    assert tf.driver.forward_compat_branches == ("470",)
    assert (tf.min_driver, tf.compat_driver, tf.driver.cuda_compat) == ("520.61.05", "520.61.05", "520")
    old = cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-devel")
    assert old.driver.require_cuda == "cuda>=11.0 brand=tesla,driver>=418,driver<419"
    assert old.driver.forward_compat_branches == ("418",)


def test_the_fixture_s_cells_have_the_real_matrix_s_driver_facts(
    expansion: Expansion, real_expansion: Expansion
) -> None:
    """The verdict tables in test_doctor.py run on the fixture; these are the real cells' rules."""
    real = {(c.framework, c.slug): c.driver for c in real_expansion.cells}
    shared = [c for c in expansion.cells if (c.framework, c.slug) in real and c.cuda in ("11.0", "11.8", "12.1")]
    assert len(shared) >= 10
    for c in shared:
        mine, theirs = c.driver, real[(c.framework, c.slug)]
        assert (mine.toolkit_driver, mine.compat_driver, mine.cuda_compat, mine.require_cuda) == (
            theirs.toolkit_driver,
            theirs.compat_driver,
            theirs.cuda_compat,
            theirs.require_cuda,
        ), c.slug


BRANDS = ("tesla", "nvidia", "geforce", "geforcertx", "quadro", "nvidiartx", "unknown")
DRIVERS = ("418.87.01", "440.33.01", "450.80.02", "470.82.01", "510.47.03", "520.61.05", "525.60.13", "535.104.05")
ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90")


def test_the_image_is_refused_exactly_where_the_rule_says_it_cannot_start(expansion: Expansion) -> None:
    """One rule: the toolkit starts the image (its NVIDIA_REQUIRE_CUDA holds) wherever the rule says it runs, and
    refuses it wherever it cannot, except where only the base's cuda-compat fails after the start (error 804)."""
    for c, driver, brand, arch in itertools.product(expansion.cells, DRIVERS, BRANDS, ARCHS):
        gpu = dl_stack.parse_arch(arch)
        assert gpu is not None
        kernel = dl_stack.kernel_for_capability(
            (gpu.major, gpu.minor), [*c.arch_sass, *(f"compute_{a[3:]}" for a in c.arch_ptx)]
        )
        if kernel is None:
            continue  # nothing runs on this GPU, whatever the driver
        capability = f"{gpu.major}.{gpu.minor}"
        fit = c.driver.fit(driver, brand=brand, arch=capability, needs_jit=kernel.startswith("compute_"))
        starts = c.driver.admits(driver, brand=brand, arch=capability)
        expected = fit.path is not None or fit.cause == compat.COMPAT_NOT_ON_BRAND
        assert starts == expected, (c.slug, driver, brand, arch, fit)


def test_every_rendered_dockerfile_sets_the_rule_s_requirement_and_labels(matrix: Matrix, expansion: Expansion) -> None:
    env = environment(REPO)
    for c in expansion.cells:
        text = render_cell(env, matrix, c)
        if c.cuda_source == "wheel":
            assert f'NVIDIA_REQUIRE_CUDA="{c.driver.require_cuda}"' in text, c.slug
        else:  # the base sets it: the value matrix.yaml records from its Dockerfile
            assert "NVIDIA_REQUIRE_CUDA=" not in text, c.slug
        labels = dict(re.findall(r'(io\.dlimages\.[a-z-]+)="([^"]*)"', text))
        assert labels["io.dlimages.min-driver"] == c.min_driver
        assert labels["io.dlimages.compat-driver"] == c.compat_driver
        assert labels["io.dlimages.forward-compat-branches"] == " ".join(c.driver.forward_compat_branches)
        assert c.as_json()["nvidia_require_cuda"] == c.driver.require_cuda


def test_only_bases_nvidia_lists_as_end_of_life_warn(expansion: Expansion) -> None:
    for c in expansion.cells:
        note = c.end_of_life_note
        if c.cuda == "11.0" and c.cuda_source == "base":
            assert note is not None and note.startswith(f"{c.base_image}: NVIDIA lists this tag as unsupported")
            assert "unsupported-tags.md" in note and "may be deleted" in note
            assert c.as_json()["base_end_of_life"] == c.base_end_of_life
        else:
            assert note is None, c.slug


# --- what matrix.yaml may say --------------------------------------------------------------------------------


def test_a_require_cuda_that_is_no_toolkit_expression_is_refused(
    data: dict[str, Any], report: Callable[[dict[str, Any]], str]
) -> None:
    data["nvidia_cuda"]["toolkits"]["11.8"]["require_cuda"] = "cuda>=11.8; rm -rf /"
    assert report(data).startswith(
        "error: matrix.yaml: nvidia_cuda.toolkits.\"11.8\".require_cuda: 'cuda>=11.8; rm -rf /' is not an "
        "NVIDIA_REQUIRE_CUDA expression"
    )


def test_a_require_cuda_about_another_cuda_version_is_refused(
    data: dict[str, Any], report: Callable[[dict[str, Any]], str]
) -> None:
    data["nvidia_cuda"]["toolkits"]["11.8"]["require_cuda"] = "cuda>=11.4 brand=tesla,driver>=450,driver<451"
    assert report(data) == (
        "error: matrix.yaml: nvidia_cuda.toolkits.\"11.8\".require_cuda: the condition 'cuda>=11.4' is not about "
        "CUDA 11.8 (allowed: cuda>=11.8)"
    )


def test_a_require_cuda_needs_its_source(data: dict[str, Any], report: Callable[[dict[str, Any]], str]) -> None:
    del data["nvidia_cuda"]["toolkits"]["11.8"]["require_source"]
    assert report(data) == (
        'error: matrix.yaml: nvidia_cuda.toolkits."11.8": require_cuda needs require_source: the base Dockerfile '
        "that sets NVIDIA_REQUIRE_CUDA"
    )


def test_a_minor_version_floor_above_the_toolkit_driver_is_refused(
    data: dict[str, Any], report: Callable[[dict[str, Any]], str]
) -> None:
    data["cuda"]["11.8"]["compat_driver"] = "530.30.02"
    assert report(data) == (
        'error: matrix.yaml: cuda."11.8".compat_driver: 530.30.02 is newer than min_driver 520.61.05 (allowed: a '
        "driver at most min_driver: the floor under minor-version compatibility, or min_driver itself)"
    )


def test_a_base_without_a_recorded_requirement_admits_only_its_own_driver(
    data: dict[str, Any], parse: Callable[[dict[str, Any]], Matrix]
) -> None:
    del data["nvidia_cuda"]["toolkits"]["11.8"]["require_cuda"]
    del data["nvidia_cuda"]["toolkits"]["11.8"]["require_source"]
    rule = compat.driver_rule(
        parse(data), "11.8", parse(data).frameworks["tensorflow"].releases["2.13.1"].variants["11.8"]
    )
    assert (rule.require_cuda, rule.forward_compat_branches) == ("cuda>=11.8", ())
    assert rule.fit("470.82.01", brand="tesla", arch="8.0", needs_jit=True).cause == compat.NOT_ADMITTED
