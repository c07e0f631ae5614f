"""The build ledger: what `invoke build` records and `invoke test` / `invoke push` read back, and a damaged file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dlimages.artifacts.ledger import LEDGER_FILE, Ledger
from dlimages.building.builder import BuildResult
from dlimages.core.errors import InputError
from dlimages.model.cells import Expansion

IMAGE_ID = "sha256:" + "d" * 64


def results(expansion: Expansion, *oks: bool) -> list[BuildResult]:
    return [
        BuildResult(cell, ok, 1.0, IMAGE_ID if ok else None) for cell, ok in zip(expansion.cells, oks, strict=False)
    ]


def test_nothing_recorded_before_the_first_build(tmp_path: Path) -> None:
    assert Ledger(tmp_path).entries() == [] and Ledger(tmp_path).built_refs() == []


def test_records_cells_and_reads_back_refs_of_successful_builds(expansion: Expansion, tmp_path: Path) -> None:
    first, second = expansion.cells[:2]
    first = dataclasses.replace(first, aliases=("v0",))
    ledger = Ledger(tmp_path)
    ledger.record([BuildResult(first, True, 1.0, IMAGE_ID), BuildResult(second, False, 1.0)])
    assert ledger.built_refs() == [first.refs[0]]
    assert ledger.built_refs(every_tag=True) == list(first.refs)
    assert ledger.cells_by_ref() == {ref: first.slug for ref in first.refs}
    # The release tag and aliases move (push may replace them in a registry); the first, immutable ref never does.
    assert ledger.moving_refs() == set(first.refs[1:]) | set(second.refs[1:])
    assert first.refs[0] not in ledger.moving_refs() and "v0" in {ref.split(":")[1] for ref in ledger.moving_refs()}
    assert [(e.cell, e.ok, e.image_id) for e in ledger.entries()] == [
        (first.slug, True, IMAGE_ID),
        (second.slug, False, None),
    ]


def test_the_config_digest_of_each_built_image_by_the_name_its_engine_gave_it(
    expansion: Expansion, tmp_path: Path
) -> None:
    first, second, third = expansion.cells[:3]
    manifest = "sha256:" + "e" * 64
    ledger = Ledger(tmp_path)
    ledger.record(
        [
            BuildResult(first, True, 1.0, IMAGE_ID, local_id=manifest),  # the containerd store: the manifest digest
            BuildResult(second, True, 1.0, IMAGE_ID, local_id=IMAGE_ID),  # the classic store: the config digest
            BuildResult(third, False, 1.0, IMAGE_ID, local_id="sha256:" + "f" * 64),  # tagging failed: not trusted
        ]
    )
    assert ledger.configs() == {manifest: IMAGE_ID, IMAGE_ID: IMAGE_ID}


def test_a_rebuild_replaces_the_cells_entry_and_keeps_the_others(expansion: Expansion, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.record(results(expansion, True, True))
    ledger.record(results(expansion, False))  # the first cell again, now failed
    assert [(e.cell, e.ok) for e in ledger.entries()] == [
        (expansion.cells[0].slug, False),
        (expansion.cells[1].slug, True),
    ]
    assert ledger.built_refs() == [expansion.cells[1].refs[0]]


def test_reads_a_ledger_written_before_image_ids_were_recorded(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).parent.mkdir(parents=True)
    (tmp_path / LEDGER_FILE).write_text(json.dumps([{"cell": "c", "refs": ["lab/x:v1"], "ok": True}]))
    assert Ledger(tmp_path).built_refs() == ["lab/x:v1"]


@pytest.mark.parametrize(
    "text", ["{not json", '{"cell": "c"}', '[{"cell": "c"}]', '[{"cell": 1, "refs": [], "ok": 1}]']
)
def test_a_damaged_ledger_is_an_input_error_saying_what_to_do(tmp_path: Path, text: str) -> None:
    (tmp_path / LEDGER_FILE).parent.mkdir(parents=True)
    (tmp_path / LEDGER_FILE).write_text(text)
    with pytest.raises(InputError) as caught:
        Ledger(tmp_path).entries()
    (problem,) = caught.value.problems
    assert problem.where == ".work/builds.json" and "is not a build ledger" in problem.message
    assert problem.allowed == "delete it and build again"
