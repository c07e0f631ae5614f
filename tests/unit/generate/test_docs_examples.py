"""The examples in README.md and docs/*.md that can be checked without Docker: every ```yaml block parses, every
`docker run` of a local image never pulls and keeps JupyterLab on 127.0.0.1, and the README's first build is
followed by the very lines `invoke build` prints for that image."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from dlimages.building.builder import BuildResult, next_commands
from dlimages.model.cells import Expansion
from dlimages.model.selection import Selection, select
from dlimages.model.spec import Matrix

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # the lab notes (docs/notes) are a record
_YAML_BLOCK = re.compile(r"^```ya?ml[ \t]*\n(.*?)^```", re.M | re.S)
_REGISTRY_REF = re.compile(r"(?:^|\s)[a-z0-9-]+(?:\.[a-z0-9-]+)+(?::\d+)?/\S+")  # a name that says its registry


def _code_lines(text: str) -> list[str]:
    """The lines of indented and fenced code blocks, without their indentation, a `\\` continuation joined."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            code = line.strip()
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1].rstrip() + " " + code
            else:
                lines.append(code)
    return lines


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_yaml_block_parses(page: Path) -> None:
    for block in _YAML_BLOCK.findall(page.read_text(encoding="utf-8")):
        for document in yaml.safe_load_all(block):
            assert isinstance(document, dict | list), f"{page.name}: a yaml block that is no mapping or list"


def test_kubernetes_pages_manifests_name_kind_and_api_version() -> None:
    blocks = _YAML_BLOCK.findall((REPO / "docs/kubernetes.md").read_text(encoding="utf-8"))
    manifests = [doc for block in blocks for doc in yaml.safe_load_all(block) if "kind" in doc]
    assert {doc["kind"] for doc in manifests} >= {"Pod", "Job", "PersistentVolumeClaim"}
    for doc in manifests:
        assert doc["apiVersion"] and doc["metadata"]["name"], doc["kind"]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_docker_run_of_a_local_image_never_pulls(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "change-me" not in text
    for line in _code_lines(text):
        if not line.startswith("docker run "):
            continue
        # A name without a registry host would be pulled from Docker Hub, where anyone may own `lab/`.
        assert "--pull never" in line or _REGISTRY_REF.search(line), line
        # JupyterLab on this machine only; `-p 8888:8888` is for prose that explains exposing it.
        assert not re.search(r"(?:^|\s)-p\s+8888:", line), line


def test_the_readmes_first_build_is_followed_by_the_lines_the_build_prints(
    real_matrix: Matrix, real_expansion: Expansion
) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    setup = readme[readme.index("## Set up and run") :]
    build = next(line for line in _code_lines(setup) if line.startswith("invoke build "))
    words = shlex.split(build)[2:]
    flags = dict(zip(words[::2], words[1::2], strict=True))
    want = Selection.from_flags(
        flags.get("--cuda"), flags.get("--torch"), flags.get("--tf"), flags.get("--python"), flags.get("--flavor")
    )
    [cell] = select(real_matrix, real_expansion, want)
    # The cell builds from PyPI on the offline Debian base: neither Docker Hub nor PyTorch's index.
    assert cell.bootstrap_base and not (cell.install.index_url or cell.install.find_links), cell.slug
    printed = next_commands([BuildResult(cell=cell, ok=True, seconds=1.0)]).splitlines()[1:]
    assert printed and all(line.startswith("  ") for line in printed)
    block = "\n".join(f"    {line.strip()}" for line in [build, *printed])
    assert f"\n{block}\n" in readme
    # docs/running.md explains those very lines.
    assert "\n".join(f"    {line.strip()}" for line in printed) in (REPO / "docs/running.md").read_text("utf-8")
