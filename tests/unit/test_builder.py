"""The builder without an engine: failure advice, the engine check's verdicts, and tagging only after success
(a fake runner plays the engine; tests/image/test_build.py does the same against the real one)."""

from __future__ import annotations

import dataclasses
import io
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.builder import BuildResult, all_built, explain_failure, run_build, summary_table
from dlimages.buildplan import BuildPlan, Secrets, plan_build
from dlimages.cells import Expansion
from dlimages.mirrors import MirrorArgs
from dlimages.runner import Runner


@pytest.mark.parametrize(
    ("output", "advice"),
    [
        ("write /var/lib/docker/tmp/x: no space left on device", "the disk is full"),
        ("ERROR: No matching distribution found for torch==9.9.9", "does not exist on the index"),
        ("SSLError(SSLCertVerificationError(... CERTIFICATE_VERIFY_FAILED", "--ca-bundle"),
        ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", "not reachable"),
        ("pull access denied for dlimages/base, repository does not exist", "invoke base"),
        ("E: Unable to locate package zsh-syntax-highlighting", "apt package is missing"),
    ],
)
def test_known_failures_get_advice(output: str, advice: str) -> None:
    assert advice in explain_failure(["#8 ...", output, "ERROR: failed to solve"])


def test_unknown_failure_quotes_the_last_line() -> None:
    assert explain_failure(["step 1", "something odd happened", ""]) == "the build failed: something odd happened"


def fake_run(results: dict[str, subprocess.CompletedProcess[str] | Exception]) -> Any:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        outcome = results[argv[1]]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return run


def done(code: int, out: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, "")


def test_engine_check_passes_with_engine_and_buildx() -> None:
    assert Runner(fake_run({"info": done(0), "buildx": done(0)})).engine_problem() is None


@pytest.mark.parametrize(
    ("results", "problem"),
    [
        ({"info": FileNotFoundError()}, "docker CLI is not installed"),
        ({"info": subprocess.TimeoutExpired("docker", 30)}, "did not answer"),
        ({"info": done(1)}, "engine is not reachable"),
        ({"info": done(0), "buildx": done(1)}, "buildx plugin is missing"),
    ],
)
def test_engine_check_names_what_is_missing(results: dict[str, Any], problem: str) -> None:
    message = Runner(fake_run(results)).engine_problem()
    assert message is not None and problem in message


class FakeEngine:
    """A build that prints `lines` and exits `code` (writing the image ID file on success), and a tag log."""

    def __init__(self, plan: BuildPlan, code: int, lines: Sequence[str]) -> None:
        self.plan, self.code, self.lines = plan, code, lines
        self.tagged: list[str] = []

    def stream(self, argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        assert list(argv) == self.plan.build
        for line in self.lines:
            on_line(line)
        if self.code == 0:
            self.plan.iidfile.write_text("sha256:" + "c" * 64)
        return self.code

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "tag":
            self.tagged.append(argv[3])
            return done(0)
        assert argv[1:4] == ["image", "inspect", "--format"], argv
        return done(0, "123456789\n")


@pytest.fixture
def plan(expansion: Expansion, tmp_path: Path) -> BuildPlan:
    cell = dataclasses.replace(expansion.cells[0], aliases=("v0",))
    return plan_build(cell, MirrorArgs("none"), Secrets(), iidfile=tmp_path / "iid")


def test_failed_build_tags_nothing_and_gives_advice(plan: BuildPlan, tmp_path: Path) -> None:
    engine = FakeEngine(plan, 1, ["#8 ...", "ERROR: No matching distribution found for torch==9.9"])
    out = io.StringIO()
    result = run_build(plan, tmp_path, out, Runner(engine.run, engine.stream))
    assert not result.ok and result.tags == ()
    assert result.error is not None and "does not exist on the index" in result.error
    assert engine.tagged == []
    assert "No matching distribution" in out.getvalue()  # the build's own output is shown as it runs


def test_good_build_gets_every_tag_after_it_succeeded(plan: BuildPlan, tmp_path: Path) -> None:
    engine = FakeEngine(plan, 0, ["#9 DONE 0.1s"])
    result = run_build(plan, tmp_path, io.StringIO(), Runner(engine.run, engine.stream))
    assert result.ok and result.image_id == "sha256:" + "c" * 64 and result.size == 123456789
    assert engine.tagged == list(plan.cell.refs) and len(plan.cell.refs) == 2


def test_summary_names_cells_not_built_after_a_failure(plan: BuildPlan, expansion: Expansion) -> None:
    failed = BuildResult(plan.cell, False, 3.0, error="the disk is full")
    later = next(cell for cell in expansion.cells if cell.slug != plan.cell.slug)
    table = summary_table([failed], [plan.cell, later])
    assert "FAILED: the disk is full" in table and "not built (an earlier build failed)" in table
    assert not all_built([failed], [plan.cell, later])
    assert not all_built([BuildResult(plan.cell, True, 3.0)], [plan.cell, later])
    assert all_built([BuildResult(plan.cell, True, 3.0)], [plan.cell])
