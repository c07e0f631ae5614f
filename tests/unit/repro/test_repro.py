"""`invoke repro`'s logic without an engine: which builds run cold, what it reports, when it says reproducible."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.repro import proof
from dlimages.repro.comparison import ImageComparison

BUILD = ["docker", "buildx", "build", "--progress=plain", "--load", "--iidfile", "work/x.iid", "images"]


def test_a_repro_build_has_no_cache_and_its_own_image_id_file(tmp_path: Path) -> None:
    argv = proof.cold(BUILD, tmp_path / "repro-1.iid")
    assert argv[:4] == ["docker", "buildx", "build", "--no-cache"]
    assert argv[argv.index("--iidfile") + 1] == str(tmp_path / "repro-1.iid")
    assert argv.count("--no-cache") == 1 and argv[-1] == "images"
    without = proof.cold([w for w in BUILD if w not in ("--iidfile", "work/x.iid")], tmp_path / "i")
    assert without[-3:] == ["--iidfile", str(tmp_path / "i"), "images"]


def test_any_dockerfile_is_built_with_the_cells_settings(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    argv = proof.dockerfile_build(*proof.dockerfile_flags(str(tmp_path / "Dockerfile"), None))
    assert "SOURCE_DATE_EPOCH=1700000000" in argv and "--provenance=false" in argv and argv[-1] == str(tmp_path)
    with pytest.raises(InputError, match="--dockerfile: no such file") as caught:
        proof.dockerfile_flags(str(tmp_path / "missing"), str(tmp_path / "nowhere"))
    assert "--context: no such folder" in str(caught.value)


NO_CELL_FLAGS = dict.fromkeys(["--cuda", "--torch", "--tf", "--python", "--flavor", "--mirror", "--base-registry"])


def test_a_dockerfile_is_not_combined_with_the_flags_of_a_cell() -> None:
    # Before: `repro --dockerfile F --torch 2.1` built F and ignored --torch without a word.
    given = {**NO_CELL_FLAGS, "--torch": "2.1", "--mirror": "none"}
    [problem] = proof.flag_problems("Dockerfile", None, None, given)
    assert problem.where == "--dockerfile"
    assert problem.message.startswith("cannot be combined with --torch, --mirror: those build a cell of the matrix")
    assert proof.flag_problems("Dockerfile", "ctx", "lab/x:v1", NO_CELL_FLAGS) == []
    assert proof.flag_problems(None, None, None, given) == []


def test_a_context_needs_a_dockerfile_and_against_names_an_image() -> None:
    problems = proof.flag_problems(None, "ctx", "--help", NO_CELL_FLAGS)
    assert [(p.where, p.message) for p in problems] == [
        ("--against '--help'", "starts with '-' (docker would read it as an option)"),
        ("--context", "only with --dockerfile (a cell is built from the repository)"),
    ]


def engine(images: Sequence[str], *, fail_at: int | None = None) -> tuple[Runner, list[list[str]]]:
    """A Runner whose builds write the next image ID to --iidfile (or fail), recording every command."""
    calls: list[list[str]] = []
    queue = list(images)

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[:3] == ["docker", "image", "inspect"]:
            return subprocess.CompletedProcess(argv, 0, "sha256:given\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def stream(argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        calls.append(list(argv))
        if fail_at is not None and len([c for c in calls if "build" in c]) == fail_at:
            on_line("ERROR: failed to solve: exit code: 1")
            return 1
        Path(argv[list(argv).index("--iidfile") + 1]).write_text(queue.pop(0))
        return 0

    return Runner(run=run, stream_lines=stream), calls


def same(a: str, b: str) -> ImageComparison:
    return ImageComparison(a, b, (), ())


def test_two_cold_builds_each_after_emptying_the_cache_mounts(tmp_path: Path) -> None:
    runner, calls = engine(["sha256:aaa", "sha256:aaa"])
    outcome = proof.reproduce("cell", BUILD, tmp_path, runner, tmp_path, on_line=lambda _: None, compare=same)
    assert outcome.reproducible
    assert [c[:3] for c in calls] == [["docker", "builder", "prune"], BUILD[:3]] * 2
    assert "identical: the same image ID" in outcome.report()
    assert outcome.report().count("cold build") == 2


def test_against_a_given_image_builds_once(tmp_path: Path) -> None:
    runner, calls = engine(["sha256:given"])
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, against="lab/x:v1", on_line=lambda _: None, compare=same
    )
    assert outcome.reproducible and outcome.first == "sha256:given"
    assert len([c for c in calls if "build" in c and "buildx" in c]) == 1
    assert "given: sha256:given (lab/x:v1)" in outcome.report()


def test_a_dirty_tree_is_never_called_reproducible(tmp_path: Path) -> None:
    runner, _ = engine(["sha256:aaa", "sha256:aaa"])
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, dirty=True, on_line=lambda _: None, compare=same
    )
    assert not outcome.reproducible
    assert "uncommitted changes" in outcome.report()


def test_a_failed_build_is_not_shown_reproducible_and_says_why(tmp_path: Path) -> None:
    runner, _ = engine(["sha256:aaa"], fail_at=2)
    outcome = proof.reproduce("cell", BUILD, tmp_path, runner, tmp_path, on_line=lambda _: None, compare=same)
    assert not outcome.reproducible
    assert "NOT SHOWN REPRODUCIBLE: the build failed (exit 1): ERROR: failed to solve" in outcome.report()


def test_different_images_are_reported_with_what_differs(tmp_path: Path) -> None:
    runner, _ = engine(["sha256:aaa", "sha256:bbb"])

    def differs(a: str, b: str) -> ImageComparison:
        return ImageComparison(a, b, ("created: 1 ≠ 2",), ())

    outcome = proof.reproduce("cell", BUILD, tmp_path, runner, tmp_path, on_line=lambda _: None, compare=differs)
    assert not outcome.reproducible
    assert "DIFFERENT" in outcome.report() and "created: 1 ≠ 2" in outcome.report()
