"""Where `invoke apt-repo --to` may write: checked before anything is written (a real git repository, no engine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dlimages.core.errors import InputError
from dlimages.core.outputs import output_folder
from dlimages.core.runner import DEFAULT as RUNNER


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "images").mkdir(parents=True)
    (root / "images/Dockerfile").write_text("FROM scratch\n")
    (root / ".gitignore").write_text(".work/\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    return root


def check(given: str | None, repo: Path) -> Path:
    return output_folder(given, "--to", repo, command="invoke apt-repo", marker="Release", runner=RUNNER)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (None, "--to: is empty"),
        ("", "--to: is empty"),
        ("  ", "--to: is empty"),
        ("{repo}", "is the repository, or a folder that holds it"),
        ("{repo}/..", "is the repository, or a folder that holds it"),
        ("{repo}/images", "where git does not ignore it"),
        ("{repo}/images/apt", "where git does not ignore it"),  # new, but in a folder git tracks: render --check
        ("{repo}/new-folder", "where git does not ignore it"),
        ("{repo}/images/Dockerfile", "is not a folder"),
        ("{repo}/.work/link", "is a symlink"),
        ("{repo}/.work/foreign", "holds files that invoke apt-repo did not make (no Release in it)"),
    ],
)
def test_a_folder_that_is_not_ours_to_fill_is_refused_before_anything_is_written(
    repo: Path, given: str | None, says: str
) -> None:
    (repo / ".work/foreign").mkdir(parents=True)
    (repo / ".work/foreign/notes.txt").write_text("mine\n")
    (repo / ".work/link").symlink_to(repo / "images")
    given = given.format(repo=repo) if given is not None else None
    with pytest.raises(InputError) as raised:
        check(given, repo)
    [problem] = raised.value.problems
    assert says in str(problem) and "outside the repository or where git ignores it" in str(problem)
    assert (repo / ".work/foreign/notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (repo / "images").iterdir()) == ["Dockerfile"]


def test_a_new_folder_one_made_before_and_one_outside_the_repository_are_taken(repo: Path, tmp_path: Path) -> None:
    assert check(str(repo / ".work/apt-repo"), repo) == (repo / ".work/apt-repo").resolve()
    (repo / ".work/made").mkdir(parents=True)
    (repo / ".work/made/Release").write_text("Suite: bookworm\n")
    assert check(str(repo / ".work/made"), repo) == (repo / ".work/made").resolve()
    assert check(str(tmp_path / "elsewhere/apt"), repo) == (tmp_path / "elsewhere/apt").resolve()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: .ci/as-user.sh checks this as a user")
def test_a_folder_this_user_cannot_write_is_refused(repo: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(InputError, match="cannot be written"):
        check(str(locked / "apt"), repo)
