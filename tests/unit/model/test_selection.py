"""Selecting cells of the fixture matrix from command-line flags: defaults, messages, nearest valid cells."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dlimages.core.errors import InputError
from dlimages.model.cells import Cell, Expansion, expand
from dlimages.model.compat import Candidate
from dlimages.model.selection import Selection, flags_for, flags_text, nearest_cells, select
from dlimages.model.spec import Matrix, version_key

CellLookup = Callable[[str, str], Cell]
Parse = Callable[[dict[str, Any] | str], Matrix]


def _select(matrix: Matrix, expansion: Expansion, **want: str) -> list[Cell]:
    return select(matrix, expansion, Selection(**want))


def _select_report(matrix: Matrix, expansion: Expansion, **want: str) -> str:
    with pytest.raises(InputError) as caught:
        _select(matrix, expansion, **want)
    return caught.value.report()


def _newest(matrix: Matrix, framework: str, partial: str) -> str:
    releases = [v for v in matrix.frameworks[framework].releases if v == partial or v.startswith(f"{partial}.")]
    return max(releases, key=version_key)


# --- The one predicate ----------------------------------------------------------------------------------------


def test_a_selection_matches_the_axis_values_it_gives() -> None:
    point = Candidate("pytorch", "2.1.2", "11.8", "3.10", "runtime")
    assert Selection().matches(point)
    assert Selection(cuda="11.8", framework="pytorch", version="2.1.2", python="3.10", flavor="runtime").matches(point)
    assert Selection(version="2").matches(point) and Selection(version="2.1").matches(point)
    for other in (
        Selection(cuda="12.1"),
        Selection(framework="tensorflow"),
        Selection(version="2.0"),
        Selection(python="3.11"),
        Selection(flavor="devel"),
    ):
        assert not other.matches(point), other


def test_a_partial_version_never_matches_a_longer_number() -> None:
    # 2.1 names 2.1.x, never 2.10.x: versions compare by whole components.
    assert not Selection(version="2.1").matches(Candidate("pytorch", "2.10.0", "11.8", "3.10", "runtime"))


def test_cells_and_excluded_combinations_are_matched_alike(expansion: Expansion) -> None:
    # The impossible-selection message reads the excluded combinations through the predicate select() uses.
    want = Selection(cuda="11.8", framework="pytorch", version="2.1")
    cells = {c.candidate for c in expansion.cells if want.matches(c.candidate)}
    excluded = {e.candidate for e in expansion.excluded if want.matches(e.candidate)}
    assert cells and excluded and not cells & excluded
    for point in cells | excluded:
        assert (point.cuda, point.framework, point.version[:4]) == ("11.8", "pytorch", "2.1.")


# --- select(): flags to cells ----------------------------------------------------------------------------------


def test_partial_version_picks_the_newest_patch_and_the_image_defaults(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, cuda="11.8", framework="pytorch", version="2.1")
    assert chosen.slug == f"cuda11.8-torch{_newest(matrix, 'pytorch', '2.1')}-py3.10-runtime"
    assert chosen.aliases == ("v0.9",)


def test_major_version_picks_the_newest_release(matrix: Matrix, expansion: Expansion) -> None:
    newest = _newest(matrix, "pytorch", "2")
    chosen = _select(matrix, expansion, framework="pytorch", version="2")
    assert {c.framework_version for c in chosen} == {newest}
    assert {c.cuda for c in chosen} == set(matrix.frameworks["pytorch"].releases[newest].variants)
    assert {(c.python, c.flavor) for c in chosen} == {("3.10", "runtime")}


def test_missing_python_picks_the_default_python_where_the_cell_has_it(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, cuda="12.1", framework="pytorch", version="2.1.2")
    assert chosen.python == "3.10"


def test_missing_python_picks_the_only_python_there_is(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, cuda="11.0", framework="pytorch", version="1.7.1")
    assert chosen.slug == "cuda11.0-torch1.7.1-py3.8-runtime"


def test_missing_python_picks_the_newest_without_the_default(data: dict[str, Any], parse: Parse) -> None:
    data["frameworks"]["pytorch"]["releases"]["2.1.2"]["python"] = ["3.8", "3.9", "3.11"]
    data["images"]["pytorch"]["default"]["version"] = "2.0"  # the default cell must still exist
    matrix = parse(data)
    [chosen] = _select(matrix, expand(matrix), cuda="11.8", framework="pytorch", version="2.1.2")
    assert chosen.python == "3.11"


def test_missing_flavor_picks_runtime(matrix: Matrix, expansion: Expansion) -> None:
    [chosen] = _select(matrix, expansion, framework="tensorflow", version="2.4.4")
    assert chosen.slug == "cuda11.0-tf2.4.4-py3.8-runtime"
    [devel] = _select(matrix, expansion, framework="tensorflow", version="2.4.4", flavor="devel")
    assert devel.slug == "cuda11.0-tf2.4.4-py3.8-devel"


def test_no_flags_pick_one_cell_per_release_and_cuda(matrix: Matrix, expansion: Expansion) -> None:
    chosen = _select(matrix, expansion)
    builds = {(c.framework, c.framework_version, c.cuda) for c in expansion.cells}
    assert sorted((c.framework, c.framework_version, c.cuda) for c in chosen) == sorted(builds)
    assert all(c.flavor == "runtime" for c in chosen)
    assert select(matrix, expansion, Selection(), defaults=False) == list(expansion.cells)


# --- Messages for flags that select nothing ------------------------------------------------------------------


def test_unknown_cuda_flag(matrix: Matrix, expansion: Expansion) -> None:
    assert _select_report(matrix, expansion, cuda="11.7") == (
        "error: --cuda: unknown CUDA version '11.7' (allowed: 11.0, 11.8, 12.1)"
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
    releases = ", ".join(matrix.frameworks["pytorch"].releases)
    assert _select_report(matrix, expansion, framework="pytorch", version="9.9") == (
        f"error: --torch: no release matches '9.9' (allowed: {releases})"
    )


def test_version_that_is_not_a_version(matrix: Matrix, expansion: Expansion) -> None:
    last = list(matrix.frameworks["tensorflow"].releases)[-1]
    assert _select_report(matrix, expansion, framework="tensorflow", version="2.x") == (
        f"error: --tf: '2.x' is not a version (allowed: e.g. {last})"
    )


@pytest.mark.parametrize("digits", ["\u0662.\u0661", "\uff12.\uff11", "2.1\u0662"])
def test_a_version_in_other_scripts_digits_is_not_a_version(matrix: Matrix, expansion: Expansion, digits: str) -> None:
    # str.isdigit() takes Arabic-Indic and full-width digits; a version is ASCII digits only.
    report = _select_report(matrix, expansion, framework="pytorch", version=digits)
    assert report.startswith(f"error: --torch: {digits!r} is not a version (allowed: e.g. ")


def test_every_bad_flag_is_reported_at_once(matrix: Matrix, expansion: Expansion) -> None:
    lines = _select_report(matrix, expansion, cuda="11.7", python="3.12", flavor="slim").splitlines()
    assert [line.split(": ")[1] for line in lines] == ["--cuda", "--python", "--flavor"]


def test_impossible_combination_names_the_reason_and_the_nearest_cells(matrix: Matrix, expansion: Expansion) -> None:
    want = Selection(cuda="11.0", framework="pytorch", version="2.1.2")
    text = _select_report(matrix, expansion, cuda="11.0", framework="pytorch", version="2.1.2")
    assert text.startswith("error: --cuda 11.0 --torch 2.1.2: no valid cell matches this selection: ")
    assert "PyTorch 2.1.2 was published for CUDA 11.8, 12.1, not 11.0 [cuda-build;" in text
    preferred = {fw: image.default.python for fw, image in matrix.images.items()}
    nearest = [flags_for(c) for c in nearest_cells(expansion.cells, want, preferred)]
    assert text.split("Nearest valid: ", 1)[1].split("; ") == nearest
    assert nearest[0] == "--cuda 11.8 --torch 2.1.2 --python 3.10 --flavor runtime"


def test_impossible_python_names_the_wheel_and_base_image_reasons(matrix: Matrix, expansion: Expansion) -> None:
    text = _select_report(matrix, expansion, framework="tensorflow", version="2.4.4", python="3.10")
    assert text.startswith("error: --tf 2.4.4 --python 3.10: no valid cell matches this selection: ")
    assert "TensorFlow 2.4.4 has wheels for Python 3.6, 3.7, 3.8, not 3.10 [python-wheel;" in text
    assert "[base-image;" in text
    assert "Nearest valid: --cuda 11.0 --tf 2.4.4 --python 3.8 --flavor runtime" in text


def test_devel_pytorch_explains_the_duplicate_cuda_rule(matrix: Matrix, expansion: Expansion) -> None:
    text = _select_report(matrix, expansion, cuda="11.8", framework="pytorch", version="2.1.2", flavor="devel")
    assert "PyTorch 2.1.2 brings its own CUDA libraries in its wheels" in text
    assert "[no-duplicate-cuda;" in text
    assert "Nearest valid: --cuda 11.8 --torch 2.1.2 --python 3.10 --flavor runtime" in text


def test_without_cuda_the_cuda_build_rule_is_left_out(matrix: Matrix, expansion: Expansion) -> None:
    # Every CUDA version was tried, so "not published for CUDA X" would only be noise.
    text = _select_report(matrix, expansion, framework="pytorch", version="1.7.1", python="3.11")
    assert "[python-wheel;" in text
    assert "[cuda-build;" not in text


# --- Nearest cells and flag texts ------------------------------------------------------------------------------


def test_nearest_cells_rank_by_missed_flags_then_version_then_default_python(cell: CellLookup) -> None:
    candidates = [
        cell("tensorflow", "cuda11.8-tf2.14.1-py3.10-runtime"),  # another framework: ranked last
        cell("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime"),  # misses the version, and far from it
        cell("pytorch", "cuda11.8-torch2.1.2-py3.8-runtime"),  # misses the CUDA version, not the default Python
        cell("pytorch", "cuda12.1-torch2.1.2-py3.10-runtime"),  # misses the CUDA version
        cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime"),  # misses the CUDA version, the default Python
    ]
    want = Selection(cuda="11.0", framework="pytorch", version="2.1")
    nearest = nearest_cells(candidates, want, {"pytorch": "3.10"})
    # One cell per release and CUDA version: the py3.8 twin of the 11.8 cell is left out.
    assert [c.slug for c in nearest] == [
        "cuda12.1-torch2.1.2-py3.10-runtime",
        "cuda11.8-torch2.1.2-py3.10-runtime",
        "cuda11.0-torch1.7.1-py3.8-runtime",
    ]


@pytest.mark.parametrize(
    ("want", "text"),
    [
        (Selection(), "(no flags)"),
        (Selection(framework="tensorflow"), "--tf"),
        (Selection(version="2.1"), "2.1"),
        (
            Selection(cuda="11.8", framework="pytorch", version="2.1", python="3.10", flavor="devel"),
            "--cuda 11.8 --torch 2.1 --python 3.10 --flavor devel",
        ),
    ],
)
def test_flags_text_shows_the_selection_as_its_flags(want: Selection, text: str) -> None:
    assert flags_text(want) == text


def test_selection_refuses_both_frameworks() -> None:
    with pytest.raises(InputError) as caught:
        Selection.from_flags("11.8", "2.1", "2.14", None, None)
    assert caught.value.report() == "error: --torch/--tf: choose one framework per build (allowed: --torch X or --tf Y)"


@pytest.mark.parametrize(
    ("flags", "where", "allowed"),
    [
        (("", None, None, None, None), "--cuda", "a version such as 11.8, or leave --cuda out"),
        ((None, "", None, None, None), "--torch", "a version such as 2.1, or leave --torch out"),
        ((None, None, "", None, None), "--tf", "a version such as 2.14, or leave --tf out"),
        ((None, None, None, " ", None), "--python", "a version such as 3.10, or leave --python out"),
        ((None, None, None, None, ""), "--flavor", "runtime or devel, or leave --flavor out"),
    ],
    ids=["cuda", "torch", "tf", "python", "flavor"],
)
def test_an_empty_flag_is_refused_never_read_as_every_cell(
    flags: tuple[str | None, ...], where: str, allowed: str
) -> None:
    with pytest.raises(InputError) as caught:
        Selection.from_flags(*flags)
    assert caught.value.report() == f"error: {where}: is empty (allowed: {allowed})"


def test_an_empty_framework_flag_still_counts_as_a_second_framework() -> None:
    with pytest.raises(InputError) as caught:
        Selection.from_flags(None, "", "2.14", None, None)
    assert [p.where for p in caught.value.problems] == ["--torch", "--torch/--tf"]


def test_selection_maps_flags_to_a_framework() -> None:
    torch = Selection.from_flags("11.8", "2.1", None, "3.10", None)
    assert (torch.cuda, torch.framework, torch.version, torch.python, torch.flavor) == (
        "11.8",
        "pytorch",
        "2.1",
        "3.10",
        None,
    )
    tf = Selection.from_flags(None, None, "2.14", None, "devel")
    assert (tf.framework, tf.version, tf.flavor) == ("tensorflow", "2.14", "devel")
    assert Selection.from_flags(None, None, None, None, None).framework is None
