"""`invoke repro`'s logic without an engine: which builds run cold, what it reports, when it says reproducible."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.commands import builds
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.generate.project import Project
from dlimages.repro import proof
from dlimages.repro.comparison import ImageComparison

REPO = Path(__file__).resolve().parents[3]
BUILD = ["docker", "buildx", "build", "--progress=plain", "--load", "--metadata-file", "work/x.json", "images"]
AAA, BBB, GIVEN, PULLED = ("sha256:" + c * 64 for c in "ab98")  # config digests


def test_a_repro_build_has_no_cache_and_its_own_metadata_file(tmp_path: Path) -> None:
    argv = proof.cold(BUILD, tmp_path / "repro-1.json")
    assert argv[:4] == ["docker", "buildx", "build", "--no-cache"]
    assert argv[-3:] == ["--metadata-file", str(tmp_path / "repro-1.json"), "images"]
    assert argv.count("--no-cache") == 1 and argv.count("--metadata-file") == 1
    without = proof.cold([w for w in BUILD if w not in ("--metadata-file", "work/x.json")], tmp_path / "i")
    assert without[-3:] == ["--metadata-file", str(tmp_path / "i"), "images"]
    iidfile = proof.cold([*BUILD[:-1], "--iidfile", "x.iid", "images"], tmp_path / "i")  # a --dockerfile build's
    assert "--iidfile" not in iidfile and iidfile.count("--metadata-file") == 1


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


def engine(
    images: Sequence[str],
    *,
    fail_at: int | None = None,
    local: dict[str, str] | None = None,
    pull: tuple[int, str] = (0, ""),
    manifest: str | None = None,
) -> tuple[Runner, list[list[str]]]:
    """A Runner (classic store) whose builds write the next config digest to --metadata-file (or fail), recording
    every command. `local`: the refs the engine knows (None: any ref is the image GIVEN); `pull`: a pull's exit code
    and stderr, a successful one making the ref known as PULLED; `manifest`: the engine is on the containerd store
    and every build's manifest digest is this one."""
    calls: list[list[str]] = []
    queue = list(images)

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[:2] == ["docker", "info"] and manifest is not None:
            return subprocess.CompletedProcess(argv, 0, '[["driver-type","io.containerd.snapshotter.v1"]]\n', "")
        if argv[:3] == ["docker", "image", "inspect"]:
            known = GIVEN if local is None else local.get(argv[-1])
            return subprocess.CompletedProcess(argv, 0 if known else 1, f"{known}\n" if known else "", "")
        if argv[:2] == ["docker", "pull"] and local is not None:
            if pull[0] == 0:
                local[argv[2]] = PULLED
            return subprocess.CompletedProcess(argv, pull[0], "", pull[1])
        return subprocess.CompletedProcess(argv, 0, "", "")

    def stream(argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        calls.append(list(argv))
        if fail_at is not None and len([c for c in calls if "build" in c]) == fail_at:
            on_line("ERROR: failed to solve: exit code: 1")
            return 1
        metadata = {"containerimage.config.digest": queue.pop(0), "containerimage.digest": manifest}
        Path(argv[list(argv).index("--metadata-file") + 1]).write_text(json.dumps(metadata))
        return 0

    return Runner(run=run, stream_lines=stream), calls


def same(a: str, b: str) -> ImageComparison:
    return ImageComparison(a, b, (), ())


def test_two_cold_builds_each_after_emptying_the_cache_mounts(tmp_path: Path) -> None:
    runner, calls = engine([AAA, AAA])
    outcome = proof.reproduce("cell", BUILD, tmp_path, runner, tmp_path, on_line=lambda _: None, compare=same)
    assert outcome.reproducible
    assert [c[:3] for c in calls] == [["docker", "info", "--format"], *[["docker", "builder", "prune"], BUILD[:3]] * 2]
    assert "identical: the same config digest" in outcome.report()
    assert outcome.report().count("cold build") == 2


def test_against_a_given_image_builds_once(tmp_path: Path) -> None:
    runner, calls = engine([GIVEN])
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, against="lab/x:v1", on_line=lambda _: None, compare=same
    )
    assert outcome.reproducible and outcome.first == GIVEN
    assert len([c for c in calls if "build" in c and "buildx" in c]) == 1
    assert f"given: {GIVEN} (lab/x:v1)" in outcome.report()


def test_on_the_containerd_store_a_build_stored_as_the_given_image_names_its_config_without_a_save(
    tmp_path: Path,
) -> None:
    # The containerd store knows images by manifest: a cold build whose manifest is the given image's has its config,
    # so the 6 GB `docker save` that reads a config otherwise is not needed.
    manifest = "sha256:" + "c" * 64
    runner, calls = engine([AAA], local={"lab/x:v1": manifest}, manifest=manifest)
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, against="lab/x:v1", on_line=lambda _: None, compare=same
    )
    assert outcome.reproducible and (outcome.first, outcome.second) == (AAA, AAA)
    assert not [c for c in calls if c[:2] == ["docker", "save"]]


def test_a_dirty_tree_is_never_called_reproducible(tmp_path: Path) -> None:
    runner, _ = engine([AAA, AAA])
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, dirty=True, on_line=lambda _: None, compare=same
    )
    assert not outcome.reproducible
    assert "uncommitted changes" in outcome.report()


def test_a_failed_build_is_not_shown_reproducible_and_says_why(tmp_path: Path) -> None:
    runner, _ = engine([AAA], fail_at=2)
    outcome = proof.reproduce("cell", BUILD, tmp_path, runner, tmp_path, on_line=lambda _: None, compare=same)
    assert not outcome.reproducible
    assert "NOT SHOWN REPRODUCIBLE: the build failed (exit 1): ERROR: failed to solve" in outcome.report()


def test_different_images_are_reported_with_what_differs(tmp_path: Path) -> None:
    runner, _ = engine([AAA, BBB])

    def differs(a: str, b: str) -> ImageComparison:
        return ImageComparison(a, b, ("created: 1 ≠ 2",), ())

    outcome = proof.reproduce("cell", BUILD, tmp_path, runner, tmp_path, on_line=lambda _: None, compare=differs)
    assert not outcome.reproducible
    assert "DIFFERENT" in outcome.report() and "created: 1 ≠ 2" in outcome.report()


DIGEST = "sha256:" + "d" * 64
PUBLISHED = f"127.0.0.1:5000/lab/x@{DIGEST}"


@pytest.mark.parametrize(
    ("against", "message"),
    [
        ("127.0.0.1:5000/lab/x@sha256:abc", "is not an image reference"),  # a digest of 3 hex digits
        ("127.0.0.1:5000/lab/x@md5:" + "d" * 32, "is not an image reference"),
        ("https://127.0.0.1:5000/lab/x", "has no valid registry host"),
        ("lab/x y", "has whitespace"),
    ],
)
def test_a_malformed_against_is_refused_saying_what_is_allowed(against: str, message: str) -> None:
    [problem] = proof.flag_problems(None, None, against, NO_CELL_FLAGS)
    assert problem.where == f"--against {against!r}" and message in problem.message
    assert problem.allowed == proof.AGAINST_ALLOWED and "REGISTRY/IMAGE@sha256:<64 hex>" in str(problem)
    assert proof.flag_problems(None, None, PUBLISHED, NO_CELL_FLAGS) == []
    assert proof.flag_problems(None, None, f"127.0.0.1:5000/lab/x:v1@{DIGEST}", NO_CELL_FLAGS) == []


def test_a_ref_without_a_digest_must_be_a_local_image() -> None:
    runner, calls = engine([], local={"127.0.0.1:5000/lab/x:v1": GIVEN})
    assert proof.against_problems("127.0.0.1:5000/lab/x:v1", runner) == []  # pushed from here: local, as before
    assert proof.against_problems(None, runner) == []
    [problem] = proof.against_problems("127.0.0.1:5000/lab/x:v2", runner)
    assert str(problem) == (
        "--against '127.0.0.1:5000/lab/x:v2': is no local image and pins no digest to pull "
        f"(allowed: {proof.AGAINST_ALLOWED})"
    )
    calls.clear()
    assert proof.against_problems(PUBLISHED, runner) == []  # pulled later, by its digest
    assert calls == [], "a digest needs no question to the engine here"


def test_the_command_refuses_a_bad_against_before_any_engine_and_a_missing_tag_before_any_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    dockerfile = str(tmp_path / "Dockerfile")
    project = Project(REPO)
    started: list[str] = []
    monkeypatch.setattr(builds, "engine", lambda *_: started.append("engine"))
    with pytest.raises(InputError, match=r"--against '127.0.0.1:5000/lab/x@sha256:abc': is not an image reference"):
        builds.repro(project, dockerfile=dockerfile, against="127.0.0.1:5000/lab/x@sha256:abc")
    assert started == []
    runner, calls = engine([], local={})
    monkeypatch.setattr(builds, "RUNNER", runner)
    with pytest.raises(InputError, match=r"--against '127.0.0.1:5000/lab/x:v1': is no local image and pins no"):
        builds.repro(project, dockerfile=dockerfile, against="127.0.0.1:5000/lab/x:v1")
    assert started == ["engine"] and not [c for c in calls if "build" in c or "pull" in c]


def test_a_published_image_not_here_is_pulled_by_its_digest_and_the_report_names_it(tmp_path: Path) -> None:
    runner, calls = engine([PULLED], local={})
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, against=PUBLISHED, on_line=lambda _: None, compare=same
    )
    assert ["docker", "pull", PUBLISHED] in calls
    assert calls.index(["docker", "pull", PUBLISHED]) < next(i for i, c in enumerate(calls) if "buildx" in c)
    assert outcome.reproducible and outcome.first == PULLED
    assert f"given: {PULLED} ({PUBLISHED})" in outcome.report()
    assert f"verified against digest {DIGEST}" in outcome.report()


def test_a_published_image_already_here_is_not_pulled_again(tmp_path: Path) -> None:
    runner, calls = engine([GIVEN], local={PUBLISHED: GIVEN})
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, against=PUBLISHED, on_line=lambda _: None, compare=same
    )
    assert outcome.reproducible and not [c for c in calls if c[:2] == ["docker", "pull"]]


@pytest.mark.parametrize(
    ("stderr", "meaning"),
    [
        (
            'Error response from daemon: Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: '
            "connection refused",
            "registry unreachable",
        ),
        (
            f"Error response from daemon: manifest for {PUBLISHED} not found: manifest unknown: manifest unknown",
            "the registry has no image under that digest",
        ),
        ("Error response from daemon: unauthorized: authentication required", "the registry refused access"),
        ("Error response from daemon: something new", "pull failed"),
    ],
)
def test_a_failed_pull_names_the_reference_and_builds_nothing(tmp_path: Path, stderr: str, meaning: str) -> None:
    runner, calls = engine([], local={}, pull=(1, stderr))
    outcome = proof.reproduce(
        "cell", BUILD, tmp_path, runner, tmp_path, against=PUBLISHED, on_line=lambda _: None, compare=same
    )
    assert not outcome.reproducible and outcome.first is None
    assert outcome.problem == f"could not pull {PUBLISHED}: {meaning}" + outcome.problem.split(meaning, 1)[1]
    assert stderr.removeprefix("Error response from daemon: ") in outcome.report()
    assert "verified against" not in outcome.report()
    assert not [c for c in calls if "buildx" in c]
