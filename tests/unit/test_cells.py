"""Expansion of the real matrix into cells, the compatibility rules, tags, and selecting cells from flags."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlimages.cells import Cell, Expansion, Selection, expand, select
from dlimages.compat import cudnn_satisfies
from dlimages.errors import InputError
from dlimages.spec import Matrix

REPO = Path(__file__).resolve().parents[2]
DOCKER_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

CellLookup = Callable[[str, str], Cell]
Parse = Callable[[dict[str, Any] | str], Matrix]

# The cells the rules allow, worked out by hand from matrix.yaml (axes: CUDA 11.0/11.6/11.8/12.1,
# Python 3.8/3.10/3.11 = ubuntu20.04/ubuntu22.04/debian12, flavors runtime/devel):
# - every PyTorch release ships CUDA in its wheels, so runtime only (devel would duplicate CUDA);
#   1.7.1 has cu110 and wheels up to 3.9 -> 3.8; 1.13.1 has cu116 and wheels up to 3.10 -> 3.8, 3.10;
#   2.0.1 has cu118; 2.1.2 to 2.4.1 have cu118 and cu121; all of these have 3.8, 3.10 and 3.11.
# - TensorFlow 2.4.4 (system CUDA 11.0, wheels up to 3.8): nvidia/cuda 11.0 exists on ubuntu20.04 only
#   -> 3.8, runtime and devel. 2.13.1 (system CUDA 11.8): nvidia/cuda 11.8 on ubuntu20.04/22.04, not
#   debian12 -> 3.8 and 3.10, both flavors. 2.14.1 (CUDA from its wheels, wheels from 3.9) -> 3.10, 3.11, runtime.
EXPECTED_PYTORCH = {
    "cuda11.0-torch1.7.1-py3.8-runtime",
    "cuda11.6-torch1.13.1-py3.8-runtime",
    "cuda11.6-torch1.13.1-py3.10-runtime",
    *(
        f"cuda{cuda}-torch{version}-py{python}-runtime"
        for version, cudas in (
            ("2.0.1", ["11.8"]),
            *((v, ["11.8", "12.1"]) for v in ("2.1.2", "2.2.2", "2.3.1", "2.4.1")),
        )
        for cuda in cudas
        for python in ("3.8", "3.10", "3.11")
    ),
}
EXPECTED_TENSORFLOW = {
    "cuda11.0-tf2.4.4-py3.8-runtime",
    "cuda11.0-tf2.4.4-py3.8-devel",
    "cuda11.8-tf2.13.1-py3.8-runtime",
    "cuda11.8-tf2.13.1-py3.8-devel",
    "cuda11.8-tf2.13.1-py3.10-runtime",
    "cuda11.8-tf2.13.1-py3.10-devel",
    "cuda11.8-tf2.14.1-py3.10-runtime",
    "cuda11.8-tf2.14.1-py3.11-runtime",
}


def _rules(expansion: Expansion, framework: str, version: str, cuda: str, python: str, flavor: str) -> dict[str, str]:
    """The rule ids (and their texts) that excluded one combination."""
    for exclusion in expansion.excluded:
        c = exclusion.candidate
        if (c.framework, c.version, c.cuda, c.python, c.flavor) == (framework, version, cuda, python, flavor):
            return {reason.rule: str(reason) for reason in exclusion.reasons}
    raise AssertionError(f"{framework} {version} CUDA {cuda} Python {python} {flavor} was not excluded")


# --- Expansion -------------------------------------------------------------------------------------------


def test_real_matrix_expands_to_exactly_the_justified_cells(expansion: Expansion) -> None:
    slugs = {(c.framework, c.slug) for c in expansion.cells}
    assert slugs == {("pytorch", s) for s in EXPECTED_PYTORCH} | {("tensorflow", s) for s in EXPECTED_TENSORFLOW}
    assert len(expansion.cells) == 38


def test_every_combination_is_either_a_cell_or_an_explained_exclusion(matrix: Matrix, expansion: Expansion) -> None:
    releases = sum(len(fw.releases) for fw in matrix.frameworks.values())
    combos = releases * len(matrix.axes.cuda) * len(matrix.axes.python) * len(matrix.axes.flavor)
    assert len(expansion.cells) + len(expansion.excluded) == combos
    assert all(exclusion.reasons for exclusion in expansion.excluded)


def test_expansion_order_is_stable(matrix: Matrix, expansion: Expansion) -> None:
    assert [c.slug for c in expand(matrix).cells] == [c.slug for c in expansion.cells]


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
    ],
)
def test_excluded_combination_names_its_rules(
    expansion: Expansion, combination: tuple[str, str, str, str, str], rules: set[str]
) -> None:
    assert set(_rules(expansion, *combination)) == rules


def test_exclusion_reasons_cite_their_source(expansion: Expansion) -> None:
    reasons = _rules(expansion, "pytorch", "2.1.2", "11.0", "3.10", "runtime")
    assert reasons["cuda-build"] == (
        "PyTorch 2.1.2 was published for CUDA 11.8, 12.1, not 11.0 "
        "[cuda-build; https://pytorch.org/get-started/previous-versions/#v212]"
    )
    base = _rules(expansion, "tensorflow", "2.13.1", "11.8", "3.11", "runtime")["base-image"]
    assert "nvidia/cuda 11.8.0 images exist for ubuntu20.04, ubuntu22.04, none with Python 3.11 (debian12)" in base


def test_cudnn_rule_excludes_a_base_image_with_too_old_cudnn(data: dict[str, Any], parse: Parse) -> None:
    data["nvidia_cuda"]["toolkits"]["11.0"]["cudnn"] = "7.6.5"
    expansion = expand(parse(data))
    assert not [c for c in expansion.cells if c.framework_version == "2.4.4"]
    reasons = _rules(expansion, "tensorflow", "2.4.4", "11.0", "3.8", "runtime")
    assert set(reasons) == {"cudnn"}
    assert "TensorFlow 2.4.4 needs cuDNN 8.0; nvidia/cuda CUDA 11.0 images carry cuDNN 7.6.5" in reasons["cudnn"]


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


def test_tensorflow_on_a_newer_cudnn_base_carries_a_note(cell: CellLookup) -> None:
    for slug in ("cuda11.8-tf2.13.1-py3.8-runtime", "cuda11.8-tf2.13.1-py3.10-devel"):
        tf = cell("tensorflow", slug)
        assert tf.cudnn == "8.9.6"
        assert tf.notes == (
            "upstream tested cuDNN 8.6; the base image carries cuDNN 8.9.6, "
            "compatible by cuDNN's same-major, newer-minor rule",
        )
    assert cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-runtime").notes == ()  # 8.0.5 is cuDNN 8.0


def test_wheel_cells_use_a_plain_os_base(matrix: Matrix, expansion: Expansion) -> None:
    wheel = [c for c in expansion.cells if c.cuda_source == "wheel"]
    assert len(wheel) == 32
    for c in wheel:
        assert c.base_image == matrix.os[c.os].image, c.slug
        assert not c.base_image.startswith("nvidia/"), c.slug
        assert c.flavor == "runtime", c.slug
        assert c.bootstrap_base is (c.os == "debian12"), c.slug


def test_base_cells_use_the_nvidia_cudnn8_tag_of_their_flavor(expansion: Expansion) -> None:
    base = [c for c in expansion.cells if c.cuda_source == "base"]
    assert {c.slug for c in base} == {s for s in EXPECTED_TENSORFLOW if "tf2.14.1" not in s}
    for c in base:
        assert c.base_image == f"nvidia/cuda:{c.cuda_toolkit}-cudnn8-{c.flavor}-{c.os}", c.slug
        assert c.framework == "tensorflow" and not c.bootstrap_base


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
    tf = cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-devel")
    assert (tf.base_image, tf.cudnn, tf.min_driver) == (
        "nvidia/cuda:11.0.3-cudnn8-devel-ubuntu20.04",
        "8.0.5",
        "450.51.06",
    )
    assert tf.as_json()["cuda_arch_list"] == ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "compute_80"]


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


def test_extras_are_installed_but_not_constrained() -> None:
    from dlimages.cells import FrameworkInstall

    install = FrameworkInstall(("tensorflow[and-cuda]==2.15.1",), None, None, None)
    assert install.constraints == ("tensorflow==2.15.1",)


def test_package_overrides_apply_to_their_release_only(cell: CellLookup) -> None:
    old = dict(cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-runtime").packages)
    assert (old["numpy"], old["pandas"], old["jupyterlab"]) == ("1.19.5", "1.3.5", "4.0.9")
    assert dict(cell("tensorflow", "cuda11.8-tf2.13.1-py3.8-runtime").packages)["numpy"] == "1.24.3"
    assert dict(cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime").packages)["numpy"] == "1.24.4"


# --- Tags ------------------------------------------------------------------------------------------------


def test_immutable_tag_names_every_axis(cell: CellLookup) -> None:
    assert (
        cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime").immutable_tag == "v1.0-cuda11.8-torch2.1.2-py3.10-runtime"
    )
    assert cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-devel").immutable_tag == "v1.0-cuda11.0-tf2.4.4-py3.8-devel"


def test_release_alias_is_only_on_each_image_default_cell(expansion: Expansion) -> None:
    aliased = {c.refs for c in expansion.cells if c.aliases}
    assert aliased == {
        ("lab/pytorch-universal-dev:v1.0-cuda11.8-torch2.1.2-py3.10-runtime", "lab/pytorch-universal-dev:v1.0"),
        ("lab/tensorflow-universal-dev:v1.0-cuda11.8-tf2.14.1-py3.10-runtime", "lab/tensorflow-universal-dev:v1.0"),
    }


def test_refs_are_unique_valid_docker_tags(expansion: Expansion) -> None:
    refs = [ref for c in expansion.cells for ref in c.refs]
    assert len(refs) == len(set(refs)) == 40
    for ref in refs:
        name, tag = ref.rsplit(":", 1)
        assert name in ("lab/pytorch-universal-dev", "lab/tensorflow-universal-dev")
        assert DOCKER_TAG.fullmatch(tag), ref


def test_each_cell_has_its_own_committed_dockerfile(expansion: Expansion) -> None:
    paths = [c.dockerfile for c in expansion.cells]
    assert len(set(paths)) == len(paths)
    for c in expansion.cells:
        assert c.dockerfile == f"images/{c.framework}/{c.slug}/Dockerfile"
        assert (REPO / c.dockerfile).is_file(), c.dockerfile


def test_an_alias_adds_a_moving_tag_to_the_newest_matching_cell(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["pytorch"]["aliases"] = [
        {"cuda": "12.1", "version": "2", "python": "3.11", "flavor": "runtime", "tag": "latest"}
    ]
    cells = expand(parse(data)).cells
    aliased = {c.slug: c.aliases for c in cells if c.framework == "pytorch" and c.aliases}
    assert aliased == {
        "cuda11.8-torch2.1.2-py3.10-runtime": ("v1.0",),
        "cuda12.1-torch2.4.1-py3.11-runtime": ("latest",),
    }


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
            "tag": "v1.0-cuda11.8-torch2.0.1-py3.10-runtime",
        }
    ]
    assert _expand_report(parse, data) == (
        "error: matrix.yaml: images: tag lab/pytorch-universal-dev:v1.0-cuda11.8-torch2.0.1-py3.10-runtime is given "
        "to two cells: cuda11.8-torch2.0.1-py3.10-runtime and cuda11.8-torch2.1.2-py3.10-runtime"
    )


def test_expand_reports_every_reference_problem(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["pytorch"]["default"]["flavor"] = "devel"
    data["images"]["tensorflow"]["default"]["python"] = "3.8"
    data["images"]["tensorflow"]["default"]["version"] = "2.14"
    lines = _expand_report(parse, data).splitlines()
    assert [line.split(": ")[2] for line in lines] == ["images.pytorch.default", "images.tensorflow.default"]


# --- select(): flags to cells ----------------------------------------------------------------------------------


def _select(matrix: Matrix, expansion: Expansion, **want: str) -> list[Cell]:
    return select(matrix, expansion, Selection(**want))


def _select_report(matrix: Matrix, expansion: Expansion, **want: str) -> str:
    with pytest.raises(InputError) as caught:
        _select(matrix, expansion, **want)
    return caught.value.report()


def test_partial_version_picks_the_newest_patch_and_the_image_defaults(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, cuda="11.8", framework="pytorch", version="2.1")
    assert chosen.slug == "cuda11.8-torch2.1.2-py3.10-runtime"
    assert chosen.aliases == ("v1.0",)


def test_major_version_picks_the_newest_release(matrix: Matrix, expansion: Expansion) -> None:
    chosen = _select(matrix, expansion, framework="pytorch", version="2")
    assert [c.slug for c in chosen] == ["cuda11.8-torch2.4.1-py3.10-runtime", "cuda12.1-torch2.4.1-py3.10-runtime"]


def test_missing_python_picks_the_default_python_where_the_cell_has_it(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, cuda="12.1", framework="pytorch", version="2.2")
    assert chosen.python == "3.10"


def test_missing_python_picks_the_only_python_there_is(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, cuda="11.0", framework="pytorch", version="1.7")
    assert chosen.slug == "cuda11.0-torch1.7.1-py3.8-runtime"


def test_missing_python_picks_the_newest_without_the_default(data: dict[str, Any], parse: Parse) -> None:
    data["frameworks"]["pytorch"]["releases"]["2.1.2"]["python"] = ["3.8", "3.9", "3.11"]
    data["images"]["pytorch"]["default"]["version"] = "2.2"  # the default cell must still exist
    matrix = parse(data)
    [chosen] = _select(matrix, expand(matrix), cuda="11.8", framework="pytorch", version="2.1")
    assert chosen.python == "3.11"


def test_missing_flavor_picks_runtime(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, framework="tensorflow", version="2.4")
    assert chosen.slug == "cuda11.0-tf2.4.4-py3.8-runtime"
    [devel] = _select(matrix, expansion, framework="tensorflow", version="2.4", flavor="devel")
    assert devel.slug == "cuda11.0-tf2.4.4-py3.8-devel"


def test_no_flags_pick_one_cell_per_release_and_cuda(matrix: Matrix, expansion: Expansion) -> None:
    chosen = _select(matrix, expansion)
    assert len(chosen) == 14  # 11 PyTorch release/CUDA pairs, 3 TensorFlow
    assert all(c.flavor == "runtime" for c in chosen)
    assert len(select(matrix, expansion, Selection(), defaults=False)) == 38


def test_unknown_cuda_flag(matrix: Matrix, expansion: Expansion) -> None:
    assert _select_report(matrix, expansion, cuda="11.7") == (
        "error: --cuda: unknown CUDA version '11.7' (allowed: 11.0, 11.6, 11.8, 12.1)"
    )


def test_unknown_python_flag(matrix: Matrix, expansion: Expansion) -> None:
    assert _select_report(matrix, expansion, python="3.12") == (
        "error: --python: unknown Python version '3.12' (allowed: 3.8, 3.10, 3.11)"
    )


def test_unknown_flavor_flag(matrix: Matrix, expansion: Expansion) -> None:
    assert (
        _select_report(matrix, expansion, flavor="slim")
        == "error: --flavor: unknown flavor 'slim' (allowed: runtime, devel)"
    )


def test_no_release_matches_the_version(matrix: Matrix, expansion: Expansion) -> None:
    assert _select_report(matrix, expansion, framework="pytorch", version="9.9") == (
        "error: --torch: no release matches '9.9' (allowed: 1.7.1, 1.13.1, 2.0.1, 2.1.2, 2.2.2, 2.3.1, 2.4.1)"
    )


def test_version_that_is_not_a_version(matrix: Matrix, expansion: Expansion) -> None:
    assert _select_report(matrix, expansion, framework="tensorflow", version="2.x") == (
        "error: --tf: '2.x' is not a version (allowed: e.g. 2.14.1)"
    )


def test_every_bad_flag_is_reported_at_once(matrix: Matrix, expansion: Expansion) -> None:
    lines = _select_report(matrix, expansion, cuda="11.7", python="3.12", flavor="slim").splitlines()
    assert [line.split(": ")[1] for line in lines] == ["--cuda", "--python", "--flavor"]


def test_impossible_combination_names_the_reason_and_the_nearest_cells(matrix: Matrix, expansion: Expansion) -> None:
    text = _select_report(matrix, expansion, cuda="11.0", framework="pytorch", version="2.1")
    assert text.startswith("error: --cuda 11.0 --torch 2.1: no valid cell matches this selection: ")
    assert "PyTorch 2.1.2 was published for CUDA 11.8, 12.1, not 11.0 [cuda-build;" in text
    nearest = text.split("Nearest valid: ", 1)[1].split("; ")
    assert nearest == [
        "--cuda 11.8 --torch 2.1.2 --python 3.10 --flavor runtime",
        "--cuda 12.1 --torch 2.1.2 --python 3.10 --flavor runtime",
        "--cuda 11.0 --torch 1.7.1 --python 3.8 --flavor runtime",
    ]


def test_impossible_python_names_the_wheel_and_base_image_reasons(matrix: Matrix, expansion: Expansion) -> None:
    text = _select_report(matrix, expansion, framework="tensorflow", version="2.4", python="3.10")
    assert text.startswith("error: --tf 2.4 --python 3.10: no valid cell matches this selection: ")
    assert "TensorFlow 2.4.4 has wheels for Python 3.6, 3.7, 3.8, not 3.10 [python-wheel;" in text
    assert "[base-image;" in text
    assert "Nearest valid: --cuda 11.0 --tf 2.4.4 --python 3.8" in text


def test_devel_pytorch_explains_the_duplicate_cuda_rule(matrix: Matrix, expansion: Expansion) -> None:
    text = _select_report(matrix, expansion, cuda="11.8", framework="pytorch", version="2.1", flavor="devel")
    assert "PyTorch 2.1.2 brings its own CUDA libraries in its wheels" in text
    assert "[no-duplicate-cuda;" in text
    assert "Nearest valid: --cuda 11.8 --torch 2.1.2" in text
