"""`invoke matrix` says what each cell's build needs (a column, a JSON list) and, with --here, keeps the cells whose
needs answer from this machine; the probe is faked (tests/unit/building/test_reach.py asks real servers)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from dlimages import commands
from dlimages.building.advice import reach
from dlimages.building.advice.reach import Answer
from dlimages.core.errors import InputError
from dlimages.generate.project import Project

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def project() -> Project:
    return Project(REPO)


def _only_pypi(urls: Sequence[str]) -> Mapping[str, Answer]:
    """This machine as the issue found it: PyPI answers, Docker Hub and PyTorch's index do not."""
    return {reach.origin(url): Answer("pytorch" not in url and "docker" not in url, "fake") for url in urls}


def test_the_table_has_a_needs_column_and_a_legend(project: Project) -> None:
    table = commands.matrix(project)
    header, _, first = table.splitlines()[:3]
    assert "  needs  " in header and "  hub+pytorch-index+pypi  " in first  # torch 1.7.0 on ubuntu, PyTorch's index
    assert "base+pypi" in table and "hub+pypi" in table
    assert "needs: where a build takes its base (hub: Docker Hub; base: the offline Debian base" in table
    assert "`invoke matrix --here`" in table


def test_here_keeps_the_cells_that_build_with_pypi_on_the_offline_base(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reach, "probe", _only_pypi)
    monkeypatch.setattr(reach, "pip_index", lambda: ("https://pypi.example.org/simple/", "pip's configuration"))
    cells = json.loads(commands.matrix(project, json_=True, here=True))
    assert cells and all(cell["needs"] == ["base", "pypi"] for cell in cells)
    slugs = {cell["cell"] for cell in cells}
    assert "cuda12.1-torch2.1.2-py3.11-runtime" in slugs  # the README's offline cell
    assert "cuda11.8-torch2.1.2-py3.11-runtime" not in slugs  # the offline base, but PyTorch's index
    assert "cuda12.9-tf2.21.0-py3.13-runtime" in slugs and "cuda12.9-tf2.21.0-py3.12-runtime" not in slugs
    said = capsys.readouterr().err
    assert "here: Docker Hub at https://registry-1.docker.io/v2/: NO answer (fake)" in said
    assert "here: PyPI (pip's configuration) at https://pypi.example.org/simple/: answers (fake)" in said
    assert f"here: {len(cells)} of {len(project.expansion.cells)} cells build with what answers here." in said


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ({"base_registry": "127.0.0.1:5000"}, "error: --base-registry: is the registry --here asks in place of"),
        ({"here": True, "explain": True}, "error: --here: lists valid cells, not exclusions"),
        ({"here": True, "base_registry": "x.example;id"}, "error: --base-registry: 'x.example;id' has no valid host"),
    ],
)
def test_here_refuses_flags_it_cannot_use(project: Project, flags: dict[str, object], said: str) -> None:
    with pytest.raises(InputError) as raised:
        commands.matrix(project, **flags)  # type: ignore[arg-type]
    assert raised.value.report().startswith(said)
