"""Running dl-smoke / dl-bench in an image, without an engine: the argv, the missing-runtime skip, the verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.inimage import meaning, run_argv, run_in_image, worst
from dlimages.runner import Runner


def runner_printing(lines: Sequence[str], code: int, seen: list[list[str]]) -> Runner:
    def stream(argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        seen.append(list(argv))
        for line in lines:
            on_line(line)
        return code

    def no_run(*_: Any, **__: Any) -> Any:
        raise AssertionError("nothing is run to completion here")

    return Runner(no_run, stream)


def test_gpus_are_requested_or_hidden() -> None:
    assert run_argv("lab/x:v1", ["dl-smoke"], gpus=True) == [
        "docker",
        "run",
        "--rm",
        "--gpus",
        "all",
        "lab/x:v1",
        "dl-smoke",
    ]
    hidden = run_argv("lab/x:v1", ["dl-smoke"], gpus=False)
    assert hidden == ["docker", "run", "--rm", "-e", "NVIDIA_VISIBLE_DEVICES=void", "lab/x:v1", "dl-smoke"]


def test_the_commands_exit_code_and_output_come_through() -> None:
    seen: list[list[str]] = []
    shown: list[str] = []
    code = run_in_image(
        runner_printing(["PASS  cuda", "RESULT passed"], 0, seen),
        "lab/x:v1",
        ["dl-smoke"],
        gpus=True,
        on_line=shown.append,
    )
    assert code == 0 and shown == ["PASS  cuda", "RESULT passed"]
    assert seen == [run_argv("lab/x:v1", ["dl-smoke"], gpus=True)]


def test_no_nvidia_runtime_is_a_skip_never_a_pass() -> None:
    refused = ['docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].']
    shown: list[str] = []
    code = run_in_image(runner_printing(refused, 125, []), "lab/x:v1", ["dl-smoke"], gpus=True, on_line=shown.append)
    assert code == 77 and "skipped (exit 77), never a pass" in shown[-1]


def test_other_docker_failures_keep_their_code() -> None:
    code = run_in_image(
        runner_printing(["Unable to find image"], 125, []), "lab/x:v1", ["dl-smoke"], gpus=True, on_line=print
    )
    assert code == 125 and meaning(code) == "error"


@pytest.mark.parametrize(
    ("codes", "verdict"),
    [([0, 0], 0), ([0, 77], 77), ([77, 1], 1), ([2, 77, 0], 2), ([125, 0], 125), ([], 0)],
)
def test_a_failure_beats_a_skip_and_a_skip_beats_a_pass(codes: list[int], verdict: int) -> None:
    assert worst(codes) == verdict
