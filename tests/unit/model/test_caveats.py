"""Known failures of a build on some nodes (matrix.yaml `caveats` of a variant, issue 19 item 6): checked when the
matrix is read, carried by the cells, said by the doctor with their source on the nodes they concern only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlimages.model.cells import CellCaveat, expand
from dlimages.model.doctor import verdict
from dlimages.model.gpunode import Gpu, Node
from dlimages.model.spec import Matrix

COMPILE = {
    "text": "torch.compile fails on this driver with CUDA 11.8 wheels",
    "source": "https://github.com/pytorch/pytorch/issues/119054",
    "driver_below": "525.60.13",
}
FUSER = {"text": "TorchScript's fuser fails on sm_86", "source": "https://github.com/pytorch/pytorch/issues/47658"}


def _with_caveats(data: dict[str, Any], *caveats: dict[str, Any]) -> dict[str, Any]:
    data["frameworks"]["pytorch"]["releases"]["2.1.2"]["variants"]["11.8"]["caveats"] = list(caveats)
    return data


def test_a_caveat_reaches_the_variants_cells_and_no_other(
    data: dict[str, Any], parse: Callable[[dict[str, Any]], Matrix]
) -> None:
    cells = expand(parse(_with_caveats(data, COMPILE))).cells
    with_it = {c.slug for c in cells if c.caveats}
    assert with_it and all("torch2.1.2" in slug and "cuda11.8" in slug for slug in with_it)
    [caveat] = next(c for c in cells if c.caveats).caveats
    assert caveat == CellCaveat(COMPILE["text"], COMPILE["source"], (), "525.60.13")


def test_the_doctor_says_a_caveat_only_on_the_nodes_it_concerns(
    data: dict[str, Any], parse: Callable[[dict[str, Any]], Matrix]
) -> None:
    matrix = parse(_with_caveats(data, COMPILE, {**FUSER, "arch": ["sm_86"]}))
    cell = next(c for c in expand(matrix).cells if c.caveats)
    compile_note = f"{COMPILE['text']} ({COMPILE['source']})"
    fuser_note = f"{FUSER['text']} ({FUSER['source']})"
    old_rtx = verdict(cell, Node("470.82.01", (Gpu("RTX 3090", "sm_86", "geforcertx"),), True, "given"))
    assert old_rtx.runs and compile_note in old_rtx.notes and fuser_note in old_rtx.notes
    new_rtx = verdict(cell, Node("525.60.13", (Gpu("RTX 3090", "sm_86", "geforcertx"),), True, "given"))
    assert compile_note not in new_rtx.notes and fuser_note in new_rtx.notes
    old_t4 = verdict(cell, Node("470.82.01", (Gpu("T4", "sm_75", "tesla"),), True, "given"))
    assert compile_note in old_t4.notes and fuser_note not in old_t4.notes


def test_a_caveat_without_a_source_or_with_a_bad_arch_is_refused(
    data: dict[str, Any], report: Callable[[dict[str, Any]], str]
) -> None:
    said = report(_with_caveats(data, {"text": "x", "arch": ["86"]}))
    where = 'frameworks.pytorch.releases."2.1.2".variants."11.8".caveats[0]'
    assert f"{where}.source: required key is missing" in said
    assert f"{where}.arch[0]:" in said
