"""The docs' generated blocks (their text from matrixdocs) in their documents: docs/matrix.md's table,
docs/provisioning.md's driver tables, docs/offline.md's mirror profiles (and, from the commands, docs/using.md's
flags). A block sits between two marker lines of its
document (`<!-- NAME:begin -->`, `<!-- NAME:end -->`); everything outside them is the document's own. Each document
is written whole or not at all (`generated`), and `render --check` names a stale or hand-edited block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts.pythonlock import lock_state
from dlimages.core.errors import InputError, Problem
from dlimages.generate.generated import GeneratedFile, remove_staged, replace, stale
from dlimages.generate.matrixdocs import driver_tables, example_nodes, matrix_table, mirror_table
from dlimages.generate.templating import environment
from dlimages.model.cells import Expansion
from dlimages.model.spec import Matrix

DOCS = "docs"  # every document with a generated block lives here; a tree without it (a test's copy) has none
MATRIX_PAGE = f"{DOCS}/matrix.md"
PROVISIONING = f"{DOCS}/provisioning.md"
OFFLINE = f"{DOCS}/offline.md"
USING = f"{DOCS}/using.md"


@dataclass(frozen=True)
class Block:
    """Generated text for the part of `document` between the lines `begin` and `end`."""

    document: str
    name: str
    text: str

    @property
    def begin(self) -> str:
        return f"<!-- {self.name}:begin -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}:end -->"

    @property
    def where(self) -> str:
        return f"the block between `{self.begin}` and `{self.end}`"


def blocks(matrix: Matrix, expansion: Expansion, locks: Mapping[str, str], root: Path) -> list[Block]:
    """Every generated block, by document; `locks`: each cell's lock status by slug (lock.lock_state); `root`: the
    repo whose templates/docs/ lay the blocks out."""
    env = environment(root)
    return [
        Block(MATRIX_PAGE, "matrix", matrix_table(env, matrix, expansion, locks)),
        Block(PROVISIONING, "drivers", driver_tables(env, matrix, expansion)),
        Block(PROVISIONING, "nodes", example_nodes(env, expansion)),
        Block(OFFLINE, "mirrors", mirror_table(env, matrix)),
    ]


def splice(text: str, block: Block) -> str:
    """The document's text with the block's text between its markers; InputError naming the document when the
    markers are not there exactly once each, begin before end. Line endings outside the block are kept."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == block.begin]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == block.end]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        found = f"found {len(begins)} `{block.begin}` and {len(ends)} `{block.end}`"
        needs = f"needs the line `{block.begin}`, then the line `{block.end}`, once each ({found})"
        writes = f"`invoke render` writes the {block.name} block between them"
        raise InputError([Problem(block.document, f"{needs}: {writes}")])
    return "".join(lines[: begins[0] + 1]) + block.text + "".join(lines[ends[0] :])


def render_documents(
    root: Path, matrix: Matrix, expansion: Expansion, extra: Sequence[Block] = ()
) -> list[GeneratedFile]:
    """The documents with their generated blocks (and the `extra` ones) in place, in memory.

    Only in a tree with a docs/ folder: the copies of the repo that tests make have none, and a document that holds
    blocks is never created from nothing. Where docs/ is, every document a block goes in must hold its markers;
    otherwise InputError names each document and nothing is written.
    """
    if not (root / DOCS).is_dir():
        return []
    locks = {cell.slug: lock_state(root, cell, matrix.packages.pip).status for cell in expansion.cells}
    by_document: dict[str, list[Block]] = {}
    for block in [*blocks(matrix, expansion, locks, root), *extra]:
        by_document.setdefault(block.document, []).append(block)
    files: list[GeneratedFile] = []
    problems: list[Problem] = []
    for document, parts in by_document.items():
        try:
            text = (root / document).read_bytes().decode("utf-8")  # bytes: line endings outside blocks stay as they are
            for block in parts:
                text = splice(text, block)
        except FileNotFoundError:
            names = ", ".join(f"`{block.begin}` ... `{block.end}`" for block in parts)
            problems.append(Problem(document, f"missing: it holds the blocks {names} that `invoke render` writes"))
        except OSError as error:
            problems.append(Problem(document, f"cannot read: {error.strerror}"))
        except UnicodeDecodeError as error:
            problems.append(Problem(document, f"not UTF-8 text ({error.reason})"))
        except InputError as error:
            problems += error.problems
        else:
            part = parts[0].where if len(parts) == 1 else "a block of " + ", ".join(f"`{b.begin}`" for b in parts)
            files.append(GeneratedFile(document, text.encode(), part=part))
    if problems:
        raise InputError(
            problems, heading="The docs generated from matrix.yaml have nowhere to go; nothing was written:"
        )
    return files


def stale_documents(root: Path, files: list[GeneratedFile]) -> list[Problem]:
    """Documents whose generated part differs from a fresh render (stale, or edited by hand), or that are missing."""
    what = "{} differs from matrix.yaml (stale or edited by hand)"
    problems = [stale(root, generated, what.format(generated.part or "its content")) for generated in files]
    return [problem for problem in problems if problem is not None]


def write_documents(root: Path, files: list[GeneratedFile]) -> list[str]:
    """Write the documents that differ ("wrote X" for each), each whole (staged beside it, then renamed over it);
    on a failure every document is left as it was. Callers hold `rendering`."""
    remove_staged(root, files)
    return replace(root, files)
