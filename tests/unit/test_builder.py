"""builder.py decisions that need no engine: failure advice and the engine check's verdicts."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from dlimages.builder import engine_problem, explain_failure


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


def done(code: int) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, "", "")


def test_engine_check_passes_with_engine_and_buildx() -> None:
    assert engine_problem(fake_run({"info": done(0), "buildx": done(0)})) is None


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
    message = engine_problem(fake_run(results))
    assert message is not None and problem in message
