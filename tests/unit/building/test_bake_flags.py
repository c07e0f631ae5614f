"""The flags of `invoke build --jobs` and `invoke bake --out` without an engine: what each accepts, where a bake file
may be written (never over a file git tracks or a file that is not a bake file), and that a refusal writes nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlimages.building.bake import MAX_JOBS, jobs_from_flags, out_problems, render_bake, write_bake
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner

BAKE = render_bake({"group": {"default": {"targets": ["a"]}}, "target": {"a": {"context": "."}}})


@pytest.mark.parametrize(("text", "jobs"), [("1", 1), ("4", 4), (str(MAX_JOBS), MAX_JOBS)])
def test_jobs_are_a_whole_number(text: str, jobs: int) -> None:
    assert jobs_from_flags(text, None, None) == jobs


@pytest.mark.parametrize("text", ["abc", "\uff11", "\u0663", "0", str(MAX_JOBS + 1), "9" * 5000, " 2", "1.5", ""])
def test_jobs_that_are_not_ascii_digits_in_range_are_refused_naming_the_flag(text: str) -> None:
    # Before: Invoke's int() ended 'abc' in a traceback and read '\uff11' (fullwidth) and '\u0663' as numbers.
    with pytest.raises(InputError) as caught:
        jobs_from_flags(text, None, None)
    [problem] = caught.value.problems
    assert problem.where == "--jobs"
    assert problem.message == f"is {text[:40]!r}, not a whole number from 1 to {MAX_JOBS} in ASCII digits"


def test_cache_flags_go_with_jobs_and_every_problem_is_said_at_once() -> None:
    with pytest.raises(InputError) as caught:
        jobs_from_flags("1", "type=registry,ref=r.example/c:1", None)
    assert [p.where for p in caught.value.problems] == ["--cache-from/--cache-to"]
    with pytest.raises(InputError) as caught:
        jobs_from_flags("x", "bad spec", None)
    assert [p.where for p in caught.value.problems] == ["--cache-from", "--jobs"]
    assert jobs_from_flags("2", "type=registry,ref=r.example/c:1", "type=inline") == 2


def git_tracking(*tracked: str) -> tuple[Runner, list[list[str]]]:
    """A runner whose `git ls-files --error-unmatch` knows `tracked` (paths relative to the repository)."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0 if argv[-1] in tracked else 1, "", "")

    return Runner(run=run), calls


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository root as the current folder: matrix.yaml, a bake file of ours, notes under .work/."""
    (tmp_path / "matrix.yaml").write_text("schema_version: 1\n")
    (tmp_path / "docker-bake.json").write_text(BAKE)
    (tmp_path / ".work").mkdir()
    (tmp_path / ".work" / "notes.txt").write_text("mine\n")
    (tmp_path / "images").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "out", ["new.json", "docker-bake.json", ".work/notes.txt", ".work/docker-bake.json", "deeper/still/bake.json"]
)
def test_a_new_file_a_bake_file_of_ours_or_anything_under_work_may_be_written(repo: Path, out: str) -> None:
    runner, calls = git_tracking()
    assert out_problems(out, repo, runner) == []
    assert calls[0][:6] == ["git", "--literal-pathspecs", "-C", str(repo.resolve()), "ls-files", "--error-unmatch"]
    assert calls[0][-2:] == ["--", out]


@pytest.mark.parametrize(
    ("out", "tracked", "message"),
    [
        ("matrix.yaml", (), "'matrix.yaml' exists and is not a bake file `invoke bake` wrote"),  # was: overwritten
        ("matrix.yaml", ("matrix.yaml",), "'matrix.yaml' is a file git tracks: the bake file would overwrite it"),
        ("docker-bake.json", ("docker-bake.json",), "'docker-bake.json' is a file git tracks"),
        ("./images/../docker-bake.json", ("docker-bake.json",), "is a file git tracks"),
        ("images", (), "'images' is a folder"),
        ("matrix.yaml/bake.json", (), "'matrix.yaml/bake.json' cannot be made: "),  # was: a traceback
        ("", (), "'' is not a file name"),
        ("  ", (), "'  ' is not a file name"),
        ("x\x00.json", (), "'x\\x00.json' has a control character"),  # was: ValueError, embedded null byte
        ("x\n.json", (), "'x\\n.json' has a control character"),
        ("x" * 300 + ".json", (), "cannot be looked at: File name too long"),
    ],
)
def test_what_bake_may_not_overwrite_or_cannot_write_is_refused_naming_out(
    repo: Path, out: str, tracked: tuple[str, ...], message: str
) -> None:
    before = {path: path.read_bytes() for path in repo.rglob("*") if path.is_file()}
    runner, _ = git_tracking(*tracked)
    [problem] = out_problems(out, repo, runner)
    assert problem.where == "--out"
    assert message in problem.message, problem.message
    assert {path: path.read_bytes() for path in repo.rglob("*") if path.is_file()} == before


def test_a_folder_this_process_may_not_write_in_is_refused(repo: Path) -> None:
    # /proc/1 refuses even root (os.access says so); a path outside the repository asks git nothing.
    runner, calls = git_tracking()
    [problem] = out_problems("/proc/1/bake.json", repo, runner)
    assert problem.message == "'/proc/1/bake.json' cannot be written here: permission denied"
    assert calls == []


def test_writing_is_atomic_and_a_refusal_of_the_system_is_an_input_error(repo: Path) -> None:
    write_bake("deeper/bake.json", {"group": {}, "target": {}})
    assert (repo / "deeper/bake.json").read_text() == render_bake({"group": {}, "target": {}})
    with pytest.raises(InputError) as caught:
        write_bake("matrix.yaml/bake.json", {"group": {}, "target": {}})
    [problem] = caught.value.problems
    assert problem.where == "--out" and problem.message.startswith("'matrix.yaml/bake.json' cannot be written: ")
    assert (repo / "matrix.yaml").read_text() == "schema_version: 1\n"
    assert sorted(p.name for p in repo.iterdir()) == [".work", "deeper", "docker-bake.json", "images", "matrix.yaml"]
