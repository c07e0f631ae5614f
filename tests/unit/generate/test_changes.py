"""Which cells a range of commits touches (`invoke matrix --since`): the fixture's cells in a scratch git repo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlimages.core.errors import InputError
from dlimages.core.runner import DEFAULT
from dlimages.generate.changes import cell_inputs, changed_since
from dlimages.model.cells import Expansion

REPO = Path(__file__).resolve().parents[3]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


@pytest.fixture
def scratch(tmp_path: Path, expansion: Expansion) -> Path:
    """A git repo with each fixture cell's folder, the assets, the bases lock and a README, in one commit."""
    repo = tmp_path / "repo"
    for cell in expansion.cells:
        folder = repo / cell_inputs(cell)[0]
        folder.mkdir(parents=True)
        (folder / "Dockerfile").write_text(cell.slug)
    (repo / "images/assets").mkdir()
    (repo / "images/assets/zshrc").write_text("1")
    (repo / "images/bases.lock.json").write_text("{}")
    (repo / "README.md").write_text("1")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    return repo


def commit(repo: Path, path: str) -> None:
    (repo / path).write_text("changed")
    git(repo, "commit", "-q", "-am", f"change {path}")


def slugs(repo: Path, expansion: Expansion, since: str) -> list[str]:
    return [cell.slug for cell in changed_since(repo, expansion.cells, since, DEFAULT).cells]


def test_only_the_cells_whose_inputs_changed_since_the_commit(scratch: Path, expansion: Expansion) -> None:
    every = [c.slug for c in expansion.cells]
    pulled = [c.slug for c in expansion.cells if not c.bootstrap_base]
    assert 0 < len(pulled) < len(every)  # the fixture has both kinds of base
    one = expansion.cells[0]
    start = git(scratch, "rev-parse", "HEAD")
    commit(scratch, "README.md")
    assert slugs(scratch, expansion, start) == []
    commit(scratch, f"{cell_inputs(one)[0]}Dockerfile")
    assert slugs(scratch, expansion, start) == [one.slug]
    commit(scratch, "images/bases.lock.json")
    assert slugs(scratch, expansion, start) == [one.slug, *[s for s in pulled if s != one.slug]]
    commit(scratch, "images/assets/zshrc")
    assert slugs(scratch, expansion, start) == every
    assert slugs(scratch, expansion, "HEAD") == []  # nothing since the last commit


def test_a_commit_of_another_branch_compares_from_the_merge_base(scratch: Path, expansion: Expansion) -> None:
    one, two = expansion.cells[0], expansion.cells[1]
    git(scratch, "switch", "-q", "-c", "feature")
    commit(scratch, f"{cell_inputs(one)[0]}Dockerfile")
    git(scratch, "switch", "-q", "main")
    commit(scratch, f"{cell_inputs(two)[0]}Dockerfile")
    # Built on main since feature forked: only main's own change, not feature's.
    assert slugs(scratch, expansion, "feature") == [two.slug]


@pytest.mark.parametrize("since", ["", "0" * 40, "deadbeef", "no-such-branch"])
def test_no_commit_or_one_this_clone_lacks_means_every_cell(scratch: Path, expansion: Expansion, since: str) -> None:
    changed = changed_since(scratch, expansion.cells, since, DEFAULT)
    assert [c.slug for c in changed.cells] == [c.slug for c in expansion.cells]
    total = len(expansion.cells)
    assert changed.note(total).startswith(f"{total} of {total} cells: every")


def test_outside_a_git_repo_every_cell(tmp_path: Path, expansion: Expansion) -> None:
    assert slugs(tmp_path, expansion, "HEAD") == [c.slug for c in expansion.cells]


@pytest.mark.parametrize("since", ["--output=/tmp/x", "-p", "a b", "x;id", "HEAD\n", "\u0661" * 7])
def test_a_revision_that_is_not_one_is_refused_naming_the_flag(
    tmp_path: Path, expansion: Expansion, since: str
) -> None:
    with pytest.raises(InputError) as caught:
        changed_since(tmp_path, expansion.cells, since, DEFAULT)
    assert caught.value.report().startswith("error: --since: ")


def test_invoke_matrix_since_filters_the_json_and_says_why_on_stderr() -> None:
    def matrix(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "invoke", "matrix", "--json", *args]
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)

    nothing, every, refused = matrix("--since", "HEAD"), matrix("--since", ""), matrix("--since", "-x")
    assert (nothing.returncode, json.loads(nothing.stdout)) == (0, []), nothing.stderr
    cells = json.loads(every.stdout)
    assert every.returncode == 0 and every.stderr.endswith("cells: every cell (no commit to compare with)\n")
    assert cells and {"cell", "flags", "bootstrap"} <= set(cells[0])
    assert cells[0]["flags"].startswith("--cuda ") and cells[0]["tags"][0].endswith(cells[0]["cell"])
    assert refused.returncode == 2 and refused.stderr.startswith("error: --since: '-x' is not a revision")
    assert "Traceback" not in refused.stderr
