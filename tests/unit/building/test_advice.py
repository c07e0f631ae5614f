"""Advice on a failed build, read from real output. Each failure is a data case, a folder under cases/advice/ with
the output, the build's inputs and the diagnosis the user sees (its README says how to add one), all checked by
`test_case`; the tests below it check what is not a diagnosis of captured output.

Every output.txt is what a real build printed on the CI machine (BuildKit 0.13.2, `docker buildx build
--progress=plain`), cut only where noted. How each was made:

- base-*: `FROM 127.0.0.1:1/library/ubuntu:22.04` (nothing listens), `FROM ubuntu:22.04` (Docker Hub does not
  resolve there), `FROM 127.0.0.1:5391/mirror/dlimages/base:debian12` against an empty local registry
  (.ci/registry.sh), the same on one with basic auth (:5392), `FROM mirror.invalid/docker.io/library/ubuntu:22.04`
  (a registry mirror that does not resolve), `FROM dlimages/base:<a tag not made here>`.
- apt-*: on dlimages/base:debian12, Debian's sources pointed at http://127.0.0.1:9/debian, at http://apt.invalid/debian,
  and at http://deb.example.org/debian with `--network none`, then `apt-get update && apt-get install curl zsh`.
- pip-refused: the real cell cuda12.1-torch2.1.2-py3.11-runtime through plan_build + run_build with
  PIP_INDEX_URL=http://127.0.0.1:9/simple/ (the apt step's 500 lines of output are cut).
- pip-tls, torch-*, tls-then-torch-index, hash-mismatch, pin-missing: `pip download` in a build FROM the PyTorch
  image, behind the machine's TLS-intercepting proxy (with its CA as the pip_ca secret, except where TLS fails).
- disk-full: `dd` into a 1 MiB tmpfs mount; unknown: a step that prints a line and exits 3.
- pip-check: `invoke build` of the real cell cuda12.1-torch2.1.2-py3.11-runtime in a clone whose requirements.lock
  pins pytz 2019.3 (tests/image/test_pip_check.py); the step's 227 lines of Collecting/Downloading are cut, and so
  are the builder's own progress lines. pip-check-two-unmet adds a second complaint, as pip words a requirement that
  is not installed at all.
- lost-layer: a CI run here after a cell's image was removed and rebuilt to the same layers (moby/buildkit#5469).
- retry-in-a-step-that-succeeded: a pip retry from pip-refused, in a step that then finished, before unknown's output.
- no-engine: what `docker buildx build` prints when no engine answers (and `docker info` before the engine started).

The DNS resolver's address in the "no such host" lines is replaced by 127.0.0.53 and trailing spaces are dropped;
nothing else is edited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pip._internal.models.index import PyPI

from dlimages.building.advice import Attempt, Diagnosis, Remedies, diagnose, offline_cell
from dlimages.model.cells import Cell, expand
from dlimages.model.spec import Matrix

CellLookup = Callable[[str, str], Cell]
CASES = Path(__file__).parent / "cases" / "advice"
# What a case.yaml may say: where the output comes from, the build that failed (`Attempt`), what matrix.yaml offers.
ATTEMPT_KEYS = ("profile", "base_image", "pip_index", "torch_index", "torch_find_links")
CASE_KEYS = frozenset({"output_of", "cell", "cell_changes", "remedies", *ATTEMPT_KEYS})
MIRROR_HELP = "https://mirror.example.org/help"
REMEDIES = ("fixture", "fixture-without-offline")  # the fixture's remedies, or those less its offline-base cells


def real(text: str) -> str:
    """PyPI's hosts as pip itself names them: the cases hold @PYPI@ and @PYPI_FILES@ where the real output named
    them."""
    return text.replace("@PYPI_FILES@", PyPI.file_storage_domain).replace("@PYPI@", PyPI.netloc)


def shown(diagnosis: Diagnosis) -> str:
    """A diagnosis as expected.txt holds it: each field that is set, a blank line, then the advice."""
    fields = ("kind", "summary", "host", "image", "evidence")
    head = [f"{name}: {value}" for name in fields if (value := getattr(diagnosis, name)) is not None]
    return "\n".join([*head, "", diagnosis.advice]) + "\n"


def case_inputs(folder: Path) -> dict[str, Any]:
    path = folder / "case.yaml"
    inputs: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    unknown = sorted(set(inputs) - CASE_KEYS)
    assert not unknown, f"{path}: unknown keys {unknown}; allowed: {sorted(CASE_KEYS)}"
    assert inputs.get("remedies", "fixture") in REMEDIES, f"{path}: `remedies` can only be one of {REMEDIES}"
    return inputs


def case_output(folder: Path, inputs: dict[str, Any]) -> list[str]:
    source = CASES / inputs["output_of"] if "output_of" in inputs else folder
    return real((source / "output.txt").read_text(encoding="utf-8")).strip("\n").splitlines()


def case_attempt(inputs: dict[str, Any], cell: CellLookup) -> Attempt:
    fields = {name: inputs[name] for name in ATTEMPT_KEYS if name in inputs}
    found = None
    if "cell" in inputs:
        framework, slug = inputs["cell"].split()
        found = dataclasses.replace(cell(framework, slug), **inputs.get("cell_changes", {}))
    return Attempt(found, **fields)


@pytest.fixture
def remedies(data: dict[str, Any], parse: Callable[[dict[str, Any]], Matrix]) -> Remedies:
    """The fixture matrix with these registry mirrors for the bases: `campus` adds one to its apt and PyPI mirrors,
    `hub` has nothing else."""
    for profile in data["mirrors"].values():
        profile.pop("bases", None)
    data["mirrors"]["campus"]["bases"] = {
        "registry": "campus.example.org/docker.io",
        "source": MIRROR_HELP,
        "limits": "",
    }
    data["mirrors"]["hub"] = {
        "description": "Base images only",
        "bases": {"registry": "mirror.invalid/docker.io", "source": MIRROR_HELP, "limits": "allow-listed images only"},
    }
    matrix = parse(data)
    return Remedies.from_matrix(matrix, expand(matrix).cells)


@pytest.mark.parametrize("folder", sorted(path for path in CASES.iterdir() if path.is_dir()), ids=lambda p: p.name)
def test_case(folder: Path, cell: CellLookup, remedies: Remedies) -> None:
    inputs = case_inputs(folder)
    offered = remedies if "remedies" in inputs else Remedies()
    if inputs.get("remedies") == "fixture-without-offline":
        offered = dataclasses.replace(remedies, cells=tuple(c for c in remedies.cells if not c.bootstrap_base))
    found = diagnose(case_output(folder, inputs), case_attempt(inputs, cell), offered)
    assert shown(found) == real((folder / "expected.txt").read_text(encoding="utf-8"))


def test_remedies_read_what_each_profile_mirrors(remedies: Remedies) -> None:
    assert [name for name, _, _ in remedies.base_mirrors] == ["campus", "hub"]
    assert remedies.bases_only == ("hub",)
    assert remedies.pypi == remedies.apt == ("campus", "cloud")
    assert remedies.pytorch_wheels == ("cloud",)
    assert any(cell.bootstrap_base for cell in remedies.cells)


def test_the_offline_cell_is_the_same_framework_and_flavor_newest_first(remedies: Remedies, cell: CellLookup) -> None:
    tf = cell("tensorflow", "cuda11.8-tf2.13.1-py3.8-devel")
    found = offline_cell(remedies.cells, tf)
    assert found is not None and found.slug == "cuda11.8-tf2.14.1-py3.11-runtime"  # no devel cell is offline
    assert offline_cell([]) is None
