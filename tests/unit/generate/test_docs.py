"""The docs made from the matrix (matrixdocs, written and checked by `invoke render`): the matrix block of
docs/matrix.md, the driver tables of docs/provisioning.md and the mirror profiles of docs/offline.md.

Behaviour runs on the fixture matrix in a repo copy with minimal documents; the repo's own documents are checked
once for drift, like images/ (test_render.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.artifacts.pythonlock import lock_state
from dlimages.commands import flags_block
from dlimages.core.errors import InputError
from dlimages.generate import docsblocks, matrixdocs
from dlimages.generate.docsblocks import (
    MATRIX_PAGE,
    OFFLINE,
    PROVISIONING,
    USING,
    Block,
    render_documents,
    splice,
    stale_documents,
)
from dlimages.generate.project import Project
from dlimages.generate.templating import environment
from dlimages.model import doctor, gpunode
from dlimages.model.cells import Expansion
from dlimages.model.spec import Matrix

REPO = Path(__file__).resolve().parents[3]
MATRIX_TEXT = "# The matrix\n\nIts own words.\n\n<!-- matrix:begin -->\nold table\n<!-- matrix:end -->\n\nMore words.\n"
PROVISIONING_TEXT = (
    "# Provisioning\r\n\r\n<!-- drivers:begin -->\r\n<!-- drivers:end -->\r\n\r\nProse.\r\n\r\n"
    "<!-- nodes:begin -->\r\n<!-- nodes:end -->\r\n"
)
OFFLINE_TEXT = "# Offline\n\n<!-- mirrors:begin -->\n<!-- mirrors:end -->\n"


@pytest.fixture
def documented(repo_copy: Path) -> Path:
    """A repo copy (the fixture matrix, the real templates and tasks.py) with docs/matrix.md, docs/provisioning.md,
    docs/offline.md and docs/using.md holding their markers, rendered once (as `invoke render` does)."""
    (repo_copy / "docs").mkdir()
    (repo_copy / MATRIX_PAGE).write_text(MATRIX_TEXT, encoding="utf-8")
    (repo_copy / PROVISIONING).write_bytes(PROVISIONING_TEXT.encode())  # CRLF: kept outside the blocks
    (repo_copy / OFFLINE).write_text(OFFLINE_TEXT, encoding="utf-8")
    (repo_copy / USING).write_text("# Using\n\n<!-- flags:begin -->\n<!-- flags:end -->\n", encoding="utf-8")
    Project(repo_copy, blocks=(flags_block(repo_copy),)).write_rendered()
    return repo_copy


def _locks(root: Path, matrix: Matrix, expansion: Expansion) -> dict[str, str]:
    return {cell.slug: lock_state(root, cell, matrix.packages.pip).status for cell in expansion.cells}


def _between(text: str, name: str) -> str:
    return text.split(f"<!-- {name}:begin -->", 1)[1].split(f"<!-- {name}:end -->", 1)[0].lstrip("\r\n")


def _render(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "render", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- the matrix page's block ----------------------------------------------------------------------------------


def test_the_matrix_block_is_what_the_matrix_gives(documented: Path, matrix: Matrix, expansion: Expansion) -> None:
    text = (documented / MATRIX_PAGE).read_text(encoding="utf-8")
    locks = _locks(documented, matrix, expansion)
    assert _between(text, "matrix") == matrixdocs.matrix_table(environment(REPO), matrix, expansion, locks)
    # Everything outside the markers is the document's own, kept as it was.
    assert text.startswith("# The matrix\n\nIts own words.\n\n<!-- matrix:begin -->\n")
    assert text.endswith("<!-- matrix:end -->\n\nMore words.\n")
    assert "old table" not in text


def test_the_matrix_block_names_every_valid_cell_and_every_excluding_rule(
    documented: Path, expansion: Expansion
) -> None:
    block = _between((documented / MATRIX_PAGE).read_text(encoding="utf-8"), "matrix")
    rows = [line for line in block.splitlines() if line.startswith("| PyTorch") or line.startswith("| TensorFlow")]
    for cell in expansion.cells:
        title = cell.title.split(" ")[0]
        assert any(
            line.startswith(f"| {title} ")
            and cell.framework_version in line.split("|")[1]
            and f"| {cell.cuda} |" in line
            for line in rows
        ), cell.slug
    for rule in {reason.rule for exclusion in expansion.excluded for reason in exclusion.reasons}:
        assert f"`{rule}`: {matrixdocs.REASON_CODES[rule]}" in block
    assert f"The {len(expansion.excluded)} excluded combinations" in block


def test_the_table_shows_a_flavor_lock_and_reason_code_per_python(matrix: Matrix, expansion: Expansion) -> None:
    block = matrixdocs.matrix_table(environment(REPO), matrix, expansion, {})
    # The fixture's TensorFlow 2.4.4 is on nvidia/cuda 11.0, whose images exist for ubuntu20.04 (Python 3.8) only.
    [row] = [line for line in block.splitlines() if line.startswith("| TensorFlow 2.4.4 | 11.0 |")]
    assert row == (
        "| TensorFlow 2.4.4 | 11.0 | runtime, devel | ✗ `base-image`, `python-wheel` | ✗ `base-image`, `python-wheel` "
        "| base `nvidia/cuda:11.0.3-cudnn8-*`, cuDNN 8.0.5 | unlocked |"
    )
    # PyTorch 1.7.1's Python 3.10 is excluded for its wheels; the devel flavor's own rule is not the reason.
    [row] = [line for line in block.splitlines() if line.startswith("| PyTorch 1.7.1 | 11.0 |")]
    assert "| ✗ `python-wheel` |" in row and "no-duplicate-cuda" not in row


def test_the_blocks_are_laid_out_by_the_roots_templates(repo_copy: Path, matrix: Matrix, expansion: Expansion) -> None:
    note = repo_copy / "templates/docs/note.md.j2"
    note.write_text("<!-- a note of this repo's own -->\n", encoding="utf-8")
    for block in docsblocks.blocks(matrix, expansion, {}, repo_copy):
        assert block.text.startswith("<!-- a note of this repo's own -->\n\n"), block.name


def test_a_pipe_in_a_table_cell_is_escaped() -> None:
    cells = environment(REPO).from_string('| {{ ("a|b", "c")|map("md")|join(" | ") }} |').render()
    assert cells == "| a\\|b | c |"


def test_every_rule_compat_can_give_has_a_code_in_the_legend() -> None:
    source = (REPO / "src/dlimages/model/compat.py").read_text(encoding="utf-8")
    rules = set(re.findall(r'Reason\(\s*"([a-z-]+)"', source))
    assert rules and rules <= set(matrixdocs.REASON_CODES), rules - set(matrixdocs.REASON_CODES)


@pytest.mark.slow
def test_a_hand_edited_matrix_block_fails_the_check_naming_its_page(documented: Path) -> None:
    page = documented / MATRIX_PAGE
    page.write_text(page.read_text(encoding="utf-8").replace("| runtime |", "| runtime, devel |", 1), "utf-8")
    with pytest.raises(InputError) as caught:
        Project(documented).check_rendered()
    assert caught.value.report() == (
        "the docs are out of date (1 files):\n"
        "error: docs/matrix.md: the block between `<!-- matrix:begin -->` and `<!-- matrix:end -->` differs from "
        "matrix.yaml (stale or edited by hand); run `invoke render`"
    )
    result = _render(documented, "--check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "docs/matrix.md: the block between `<!-- matrix:begin -->`" in result.stderr
    assert _render(documented).returncode == 0
    assert _render(documented, "--check").returncode == 0


def test_text_outside_the_blocks_is_the_documents_own(documented: Path) -> None:
    page = documented / MATRIX_PAGE
    page.write_text(page.read_text(encoding="utf-8") + "\nA paragraph someone added.\n", "utf-8")
    Project(documented).check_rendered()  # no drift: only the blocks are generated


def test_a_document_without_its_markers_stops_the_render_and_nothing_is_written(documented: Path) -> None:
    snapshot = {p: p.read_bytes() for p in sorted(documented.rglob("*")) if p.is_file() and "__pycache__" not in str(p)}
    (documented / MATRIX_PAGE).write_text("# The matrix\n\n<!-- matrix:end -->\n<!-- matrix:begin -->\n", "utf-8")
    snapshot[documented / MATRIX_PAGE] = (documented / MATRIX_PAGE).read_bytes()
    # A template change that would rewrite every Dockerfile: it must not reach images/ either.
    labels = documented / "templates/partials/labels.j2"
    labels.write_text(labels.read_text(encoding="utf-8").replace("Labels last", "Labels, last"), "utf-8")
    snapshot[labels] = labels.read_bytes()
    result = _render(documented)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "error: docs/matrix.md: needs the line `<!-- matrix:begin -->`, then the line `<!-- matrix:end -->`, once each "
        "(found 1 `<!-- matrix:begin -->` and 1 `<!-- matrix:end -->`)"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    after = {p: p.read_bytes() for p in sorted(documented.rglob("*")) if p.is_file() and "__pycache__" not in str(p)}
    assert after == snapshot


def test_a_missing_guide_is_named_when_the_docs_are_there(documented: Path) -> None:
    (documented / PROVISIONING).unlink()
    with pytest.raises(InputError) as caught:
        Project(documented).documents()
    assert "error: docs/provisioning.md: missing: it holds the blocks `<!-- drivers:begin -->`" in caught.value.report()


def test_a_tree_without_a_docs_folder_has_no_docs(repo_copy: Path) -> None:
    # The copies of the repo other tests make: nothing to put a block in, and no document is made from nothing.
    assert Project(repo_copy).documents() == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("no markers\n", "found 0 `<!-- matrix:begin -->` and 0 `<!-- matrix:end -->`"),
        ("<!-- matrix:begin -->\n<!-- matrix:begin -->\n<!-- matrix:end -->\n", "found 2"),
        ("<!-- matrix:end -->\n<!-- matrix:begin -->\n", "found 1"),
        ("<!-- matrix:begin --> trailing\n<!-- matrix:end -->\n", "found 0"),
    ],
    ids=["none", "twice", "reversed", "not-a-line-of-its-own"],
)
def test_splice_needs_each_marker_once_on_its_own_line(text: str, found: str) -> None:
    with pytest.raises(InputError) as caught:
        splice(text, Block(MATRIX_PAGE, "matrix", "new\n"))
    assert f"error: docs/matrix.md: needs the line `<!-- matrix:begin -->`, then the line `<!-- matrix:end -->`, " \
        f"once each ({found}" in caught.value.report()  # fmt: skip


def test_splice_replaces_only_the_block_and_keeps_line_endings() -> None:
    text = "a\r\n<!-- matrix:begin -->\r\nold\r\n<!-- matrix:end -->\r\nb\r\n"
    assert (
        splice(text, Block(MATRIX_PAGE, "matrix", "new\n"))
        == "a\r\n<!-- matrix:begin -->\r\nnew\n<!-- matrix:end -->\r\nb\r\n"
    )


# --- the guide's driver tables ----------------------------------------------------------------------------------


def test_the_driver_floors_are_matrix_yamls(documented: Path, matrix: Matrix, expansion: Expansion) -> None:
    guide = (documented / PROVISIONING).read_bytes().decode()
    drivers = _between(guide, "drivers")
    assert guide.startswith("# Provisioning\r\n\r\n<!-- drivers:begin -->\r\n") and guide.endswith(
        "<!-- nodes:end -->\r\n"
    )
    for cuda in matrix.axes.cuda:
        toolkit = matrix.cuda[cuda]
        floor = "none: its own driver" if toolkit.compat_driver == toolkit.min_driver else toolkit.compat_driver
        assert f"\n| {cuda} | {toolkit.toolkit} | {toolkit.min_driver} | {floor}" in drivers, cuda
    # Forward-compatibility branches: those each nvidia/cuda cell's rule admits on data-center GPUs.
    for cell in expansion.cells:
        if cell.cuda_source == "base":
            [row] = [line for line in drivers.splitlines() if line.startswith(f"| {cell.cuda} |")]
            assert all(f"R{branch}" in row for branch in cell.driver.forward_compat_branches), row
            assert cell.driver.forward_compat_branches, cell.slug  # the fixture's bases all admit some
    # Every image's NVIDIA_REQUIRE_CUDA from wheels, verbatim; nvidia/cuda's through the branches it admits.
    for cell in expansion.cells:
        if cell.cuda_source == "wheel":
            assert f"`{cell.driver.require_cuda}` (ours)" in drivers
        else:
            assert f"branch {doctor.admitted_branches(cell.driver.require_cuda)}" in drivers


def test_a_hand_edited_driver_table_fails_the_check_naming_the_guide(documented: Path, matrix: Matrix) -> None:
    guide = documented / PROVISIONING
    driver = matrix.cuda["11.8"].min_driver
    guide.write_bytes(guide.read_bytes().replace(f"| {driver} |".encode(), b"| 515.0.0 |", 1))
    with pytest.raises(InputError) as caught:
        Project(documented).check_rendered()
    assert caught.value.report().endswith(
        "error: docs/provisioning.md: a block of `<!-- drivers:begin -->`, `<!-- nodes:begin -->` differs from "
        "matrix.yaml (stale or edited by hand); run `invoke render`"
    )


def test_the_example_nodes_are_the_doctors_verdicts(documented: Path, expansion: Expansion) -> None:
    nodes = _between((documented / PROVISIONING).read_bytes().decode(), "nodes")
    for example in matrixdocs.EXAMPLE_NODES:
        node = gpunode.node_from_flags(example.gpu, example.driver, lambda: pytest.fail("probed"), example.brand)
        runs = sum(doctor.verdict(cell, node).runs for cell in expansion.cells)
        [row] = [line for line in nodes.splitlines() if f"`{example.flags}`" in line]
        assert f"`{example.flags}` | {runs} (" in row, row


def test_the_repos_guide_states_where_its_numbers_come_from() -> None:
    guide = (REPO / PROVISIONING).read_text(encoding="utf-8")
    for source in ("`min_driver` and `compat_driver` under `cuda:`", "nvidia_cuda.toolkits.<cuda>.require_cuda",
                   "compat.DriverRule.forward_compat_branches", "libnvidia-container", "src/cli/dsl.c",
                   "NVIDIA_DISABLE_REQUIRE", "invoke bases.mirror", "--base-registry", "gpu-multi.md",
                   "invoke doctor --gpu sm_80 --driver 470.82.01 --brand tesla", "--json"):  # fmt: skip
        assert source in guide, source


def test_the_requirements_the_guides_prose_quotes_are_images_own(real_expansion: Expansion) -> None:
    guide = (REPO / PROVISIONING).read_text(encoding="utf-8")
    prose = re.sub(r"<!-- (\w+):begin -->.*?<!-- \1:end -->", "", guide, flags=re.S)
    quoted = re.findall(r"`(cuda>=[^`]*)`", prose)
    assert quoted
    for requirement in quoted:
        assert any(cell.driver.require_cuda == requirement for cell in real_expansion.cells), requirement


# --- the repo's own documents, and determinism ------------------------------------------------------------------


def test_committed_docs_are_up_to_date(real_matrix: Matrix, real_expansion: Expansion) -> None:
    files = render_documents(REPO, real_matrix, real_expansion)
    assert [f.path for f in files] == [MATRIX_PAGE, PROVISIONING, OFFLINE]
    problems = stale_documents(REPO, files)
    assert problems == [], "\n".join(map(str, problems))


def test_the_readme_links_the_matrix_and_the_guide() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/matrix.md)" in readme
    assert "(docs/provisioning.md)" in readme


_RENDER = """
from pathlib import Path
from dlimages.generate.project import Project
Project(Path.cwd()).write_rendered()
"""


@pytest.mark.slow
def test_the_docs_are_the_same_bytes_in_two_processes(tmp_path: Path) -> None:
    # Different hash seeds, different folders: set order, dict order or a path leaking into the text would show.
    outputs = []
    for seed in ("1", "2"):
        root = tmp_path / f"render-{seed}"
        (root / "docs").mkdir(parents=True)
        shutil.copy2(REPO / "matrix.yaml", root / "matrix.yaml")
        shutil.copytree(REPO / "templates", root / "templates")
        (root / MATRIX_PAGE).write_text(MATRIX_TEXT, encoding="utf-8")
        (root / PROVISIONING).write_bytes(PROVISIONING_TEXT.encode())
        (root / OFFLINE).write_text(OFFLINE_TEXT, encoding="utf-8")
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", _RENDER], cwd=root, env=env, check=True, timeout=120)
        outputs.append([(root / path).read_bytes() for path in (MATRIX_PAGE, PROVISIONING, OFFLINE)])
    assert outputs[0] == outputs[1]
    assert str(tmp_path).encode() not in b"".join(outputs[0])


def test_the_mirror_table_is_matrix_yamls_profiles_and_host(real_matrix: Matrix) -> None:
    table = _between((REPO / OFFLINE).read_text(encoding="utf-8"), "mirrors")
    profiles = re.findall(r"^\| `([a-z0-9_-]+)` \|", table, re.M)
    assert profiles == [*real_matrix.mirrors, "host"]
    aliyun = next(line for line in table.splitlines() if line.startswith("| `aliyun` |"))
    assert str(real_matrix.mirrors["aliyun"].pytorch_wheels) in aliyun
