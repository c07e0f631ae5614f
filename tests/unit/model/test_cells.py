"""Expansion of the fixture matrix into cells: the compatibility rules, the facts each cell resolves, and the
problems only expansion can see (references to cells that do not exist)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dlimages.core.errors import InputError
from dlimages.model.cells import Cell, Expansion, FrameworkInstall, expand
from dlimages.model.compat import cudnn_satisfies
from dlimages.model.spec import Matrix

CellLookup = Callable[[str, str], Cell]
Parse = Callable[[dict[str, Any] | str], Matrix]
Combination = tuple[str, str, str, str, str]  # framework, version, cuda, python, flavor


def _reasons(expansion: Expansion, combination: Combination) -> dict[str, str]:
    """The reasons (by rule id) that excluded one combination."""
    for exclusion in expansion.excluded:
        c = exclusion.candidate
        if (c.framework, c.version, c.cuda, c.python, c.flavor) == combination:
            return {reason.rule: str(reason) for reason in exclusion.reasons}
    raise AssertionError(f"{combination} was not excluded")


# --- Expansion -------------------------------------------------------------------------------------------


def test_every_combination_is_either_a_cell_or_an_explained_exclusion(matrix: Matrix, expansion: Expansion) -> None:
    releases = sum(len(fw.releases) for fw in matrix.frameworks.values())
    combos = releases * len(matrix.axes.cuda) * len(matrix.axes.python) * len(matrix.axes.flavor)
    assert len(expansion.cells) + len(expansion.excluded) == combos
    assert all(exclusion.reasons for exclusion in expansion.excluded)
    judged = [c.candidate for c in expansion.cells] + [e.candidate for e in expansion.excluded]
    assert len(set(judged)) == combos


def test_expansion_order_is_stable(matrix: Matrix, expansion: Expansion) -> None:
    assert [c.slug for c in expand(matrix).cells] == [c.slug for c in expansion.cells]


# --- The compatibility rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("combination", "rules"),
    [
        pytest.param(("pytorch", "2.1.2", "11.0", "3.10", "runtime"), {"cuda-build"}, id="torch2.1.2-cuda11.0"),
        pytest.param(("pytorch", "1.7.1", "11.0", "3.10", "runtime"), {"python-wheel"}, id="torch1.7.1-py3.10"),
        pytest.param(("pytorch", "2.1.2", "11.8", "3.10", "devel"), {"no-duplicate-cuda"}, id="torch-devel"),
        pytest.param(
            ("tensorflow", "2.4.4", "11.0", "3.10", "runtime"), {"python-wheel", "base-image"}, id="tf2.4.4-py3.10"
        ),
        pytest.param(("tensorflow", "2.13.1", "11.8", "3.11", "runtime"), {"base-image"}, id="tf2.13.1-debian12"),
        pytest.param(("tensorflow", "2.14.1", "11.8", "3.8", "runtime"), {"python-wheel"}, id="tf2.14.1-py3.8"),
        pytest.param(("tensorflow", "2.14.1", "11.8", "3.10", "devel"), {"no-duplicate-cuda"}, id="tf2.14.1-devel"),
        pytest.param(("tensorflow", "2.4.4", "12.1", "3.8", "runtime"), {"cuda-build"}, id="tf2.4.4-cuda12.1"),
        pytest.param(("tensorflow", "2.15.1", "12.1", "3.10", "runtime"), {"cudnn"}, id="tf2.15.1-old-cudnn"),
        pytest.param(
            ("tensorflow", "2.15.1", "12.1", "3.11", "devel"), {"base-image", "cudnn"}, id="tf2.15.1-debian12"
        ),
    ],
)
def test_excluded_combination_names_its_rules(expansion: Expansion, combination: Combination, rules: set[str]) -> None:
    assert set(_reasons(expansion, combination)) == rules


NVIDIA_TAGS = "https://gitlab.com/nvidia/container-images/cuda/-/blob/master/doc/supported-tags.md"


def test_each_rule_says_why_and_cites_its_source(expansion: Expansion) -> None:
    old = "https://pytorch.org/get-started/previous-versions/#v171"
    assert _reasons(expansion, ("pytorch", "1.7.1", "11.8", "3.10", "runtime")) == {
        "cuda-build": f"PyTorch 1.7.1 was published for CUDA 11.0, not 11.8 [cuda-build; {old}]",
        "python-wheel": "PyTorch 1.7.1 with torchvision 0.8.2, torchaudio 0.7.2 has wheels for Python 3.6, 3.7, 3.8, "
        f"3.9, not 3.10 [python-wheel; {old}]",
    }
    assert _reasons(expansion, ("pytorch", "2.1.2", "11.8", "3.10", "devel")) == {
        "no-duplicate-cuda": "PyTorch 2.1.2 brings its own CUDA libraries in its wheels; a devel base would ship "
        "the toolkit's copies of the same libraries again "
        "[no-duplicate-cuda; https://pytorch.org/get-started/previous-versions/#v212]",
    }
    tf = "https://www.tensorflow.org/install/source#gpu"
    assert _reasons(expansion, ("tensorflow", "2.15.1", "12.1", "3.8", "runtime")) == {
        "python-wheel": f"TensorFlow 2.15.1 has wheels for Python 3.9, 3.10, 3.11, not 3.8 [python-wheel; {tf}]",
        "base-image": "TensorFlow 2.15.1 uses the system's CUDA; nvidia/cuda 12.1.1 images exist for ubuntu22.04, "
        f"none with Python 3.8 (ubuntu20.04) [base-image; {NVIDIA_TAGS}]",
        "cudnn": f"TensorFlow 2.15.1 needs cuDNN 8.9; nvidia/cuda CUDA 12.1 images carry cuDNN 8.8.1 [cudnn; {tf}]",
    }


def test_base_image_rule_without_any_image_for_the_cuda_version(data: dict[str, Any], parse: Parse) -> None:
    del data["nvidia_cuda"]["toolkits"]["11.0"]
    reasons = _reasons(expand(parse(data)), ("tensorflow", "2.4.4", "11.0", "3.8", "runtime"))
    assert reasons == {"base-image": f"nvidia/cuda has no images for CUDA 11.0 [base-image; {NVIDIA_TAGS}]"}


@pytest.mark.parametrize(
    ("provided", "needed", "ok"),
    [
        ("8.9.6", "8.6", True),  # same major, newer minor
        ("8.0.5", "8.0", True),
        ("8.6.0", "8.6.0", True),
        ("8.6", "8.6.9", True),  # patch releases do not matter
        ("8.5.0", "8.6", False),  # older minor
        ("9.1.0", "8.9", False),  # another major is another ABI
        ("8.9.7", "9.1.0", False),
    ],
)
def test_cudnn_satisfies_within_a_major_version(provided: str, needed: str, ok: bool) -> None:
    assert cudnn_satisfies(provided, needed) is ok


# --- What each cell resolves -------------------------------------------------------------------------------


def test_tensorflow_on_a_newer_cudnn_base_carries_a_note(cell: CellLookup) -> None:
    for slug in ("cuda11.8-tf2.13.1-py3.8-runtime", "cuda11.8-tf2.13.1-py3.10-devel"):
        tf = cell("tensorflow", slug)
        assert tf.cudnn == "8.9.6"
        assert tf.notes == (
            "upstream tested cuDNN 8.6; the base image carries cuDNN 8.9.6, "
            "compatible by cuDNN's same-major, newer-minor rule",
        )
    assert cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-runtime").notes == ()  # 8.0.5 is cuDNN 8.0


def _cuda_libs(matrix: Matrix, c: Cell) -> str:
    return matrix.frameworks[c.framework].releases[c.framework_version].variants[c.cuda].cuda_libs


def test_wheel_cells_use_a_plain_os_base(matrix: Matrix, expansion: Expansion) -> None:
    wheel = [c for c in expansion.cells if c.cuda_source == "wheel"]
    assert {c.slug for c in wheel} == {c.slug for c in expansion.cells if _cuda_libs(matrix, c) == "wheel"}
    for c in wheel:
        assert c.base_image == matrix.os[c.os].image, c.slug
        assert not c.base_image.startswith("nvidia/"), c.slug
        assert c.flavor == "runtime", c.slug
        assert c.bootstrap_base is matrix.os[c.os].bootstrap, c.slug


def test_base_cells_use_the_nvidia_cudnn8_tag_of_their_flavor(matrix: Matrix, expansion: Expansion) -> None:
    base = [c for c in expansion.cells if c.cuda_source == "base"]
    assert {c.slug for c in base} == {c.slug for c in expansion.cells if _cuda_libs(matrix, c) == "system"}
    assert {c.flavor for c in base} == {"runtime", "devel"}
    for c in base:
        assert c.base_image == f"nvidia/cuda:{c.cuda_toolkit}-cudnn8-{c.flavor}-{c.os}", c.slug
        assert not c.bootstrap_base, c.slug


def test_cell_facts_come_from_the_matrix(cell: CellLookup) -> None:
    torch = cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")
    assert (torch.cuda_toolkit, torch.cudnn, torch.os, torch.min_driver, torch.compat_driver) == (
        "11.8.0",
        "8.7.0",
        "ubuntu22.04",
        "520.61.05",
        "450.80.02",
    )
    assert torch.as_json()["cuda_arch_list"] == ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert torch.title == "PyTorch 2.1.2"
    tf = cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-devel")
    assert (tf.base_image, tf.cudnn, tf.min_driver) == (
        "nvidia/cuda:11.0.3-cudnn8-devel-ubuntu20.04",
        "8.0.5",
        "450.51.06",
    )
    # Every fatbin of TF 2.4's wheels carries sm_80 cubins (docs/notes/research-tf-fatbins.md).
    assert tf.as_json()["cuda_arch_list"] == ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "compute_80"]
    assert tf.title == "TensorFlow 2.4.4"


def test_pytorch_installs_from_its_cuda_index(cell: CellLookup) -> None:
    install = cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime").install
    assert install.requirements == ("torch==2.1.2+cu118", "torchaudio==2.1.2+cu118", "torchvision==0.16.2+cu118")
    assert (install.index_url, install.find_links, install.variant_tag) == (
        "https://download.pytorch.org/whl/cu118",
        None,
        "cu118",
    )


def test_old_pytorch_installs_from_find_links_and_torchaudio_has_no_local_tag(cell: CellLookup) -> None:
    install = cell("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime").install
    assert install.requirements == ("torch==1.7.1+cu110", "torchaudio==0.7.2", "torchvision==0.8.2+cu110")
    assert (install.index_url, install.find_links) == (None, "https://download.pytorch.org/whl/torch_stable.html")


def test_pypi_default_build_needs_no_extra_index(cell: CellLookup) -> None:
    install = cell("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime").install
    assert install.requirements == ("torch==2.1.2", "torchaudio==2.1.2", "torchvision==0.16.2")
    assert (install.index_url, install.find_links, install.variant_tag) == (None, None, None)


def test_tensorflow_wheel_cell_installs_its_cuda_libraries_by_name(cell: CellLookup) -> None:
    # [and-cuda] also pins tensorrt==8.5.3.1, which PyPI lacks: the CUDA packages are named instead.
    install = cell("tensorflow", "cuda11.8-tf2.14.1-py3.10-runtime").install
    assert install.requirements[0] == "tensorflow==2.14.1"
    assert "nvidia-cudnn-cu11==8.7.0.84" in install.requirements
    assert "nvidia-cuda-runtime-cu11==11.8.89" in install.requirements
    assert not any(r.startswith("tensorrt") for r in install.requirements)
    assert install.constraints == install.requirements
    assert (install.index_url, install.find_links, install.variant_tag) == (None, None, None)


def test_a_system_cuda_cell_installs_the_cuda_packages_it_names_too(cell: CellLookup) -> None:
    # TF 2.13.1 on an nvidia/cuda base: the base has the CUDA libraries, NVIDIA's nvcc wheel brings XLA's libdevice.
    install = cell("tensorflow", "cuda11.8-tf2.13.1-py3.10-runtime").install
    assert install.requirements == ("tensorflow==2.13.1", "nvidia-cuda-nvcc-cu11==11.8.89")
    assert install.constraints == install.requirements


def test_extras_are_installed_but_not_constrained() -> None:
    install = FrameworkInstall(("tensorflow[and-cuda]==2.15.1",), None, None, None)
    assert install.constraints == ("tensorflow==2.15.1",)


def test_package_overrides_apply_to_their_release_only(cell: CellLookup) -> None:
    old = dict(cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-runtime").packages)
    assert (old["numpy"], old["pandas"], old["jupyterlab"]) == ("1.19.5", "1.3.5", "4.0.9")
    assert dict(cell("tensorflow", "cuda11.8-tf2.13.1-py3.8-runtime").packages)["numpy"] == "1.24.3"
    assert dict(cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime").packages)["numpy"] == "1.24.4"


# --- Problems in the matrix's own references (expand) --------------------------------------------------------


def _expand_report(parse: Parse, data: dict[str, Any]) -> str:
    matrix = parse(data)  # the schema and cross-checks pass: the problem is only visible after expansion
    with pytest.raises(InputError) as caught:
        expand(matrix)
    return caught.value.report()


def test_default_naming_no_valid_cell(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["pytorch"]["default"]["cuda"] = "11.0"
    assert _expand_report(parse, data) == (
        "error: matrix.yaml: images.pytorch.default: names no valid cell (cuda 11.0, version 2.1, python 3.10, "
        "flavor runtime); see `invoke matrix --explain`"
    )


def test_alias_naming_no_valid_cell(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["tensorflow"]["aliases"] = [
        {"cuda": "11.8", "version": "2.14", "python": "3.10", "flavor": "devel", "tag": "devel"}
    ]
    assert _expand_report(parse, data) == (
        "error: matrix.yaml: images.tensorflow.aliases[0]: names no valid cell (cuda 11.8, version 2.14, "
        "python 3.10, flavor devel); see `invoke matrix --explain`"
    )


def test_tag_given_to_two_cells(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["pytorch"]["aliases"] = [
        {
            "cuda": "11.8",
            "version": "2.1",
            "python": "3.10",
            "flavor": "runtime",
            "tag": "v0.9-cuda11.8-torch2.0.1-py3.10-runtime",
        }
    ]
    assert _expand_report(parse, data) == (
        "error: matrix.yaml: images: tag test/pytorch-dev:v0.9-cuda11.8-torch2.0.1-py3.10-runtime is given "
        "to two cells: cuda11.8-torch2.0.1-py3.10-runtime and cuda11.8-torch2.1.2-py3.10-runtime"
    )


def test_expand_reports_every_reference_problem(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["pytorch"]["default"]["flavor"] = "devel"
    data["images"]["tensorflow"]["default"]["python"] = "3.8"
    data["images"]["tensorflow"]["default"]["version"] = "2.14"
    lines = _expand_report(parse, data).splitlines()
    assert [line.split(": ")[2] for line in lines] == ["images.pytorch.default", "images.tensorflow.default"]
