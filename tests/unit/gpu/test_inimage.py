"""Running dl-smoke / dl-bench in an image, without an engine: the argv, the missing-runtime skip, the verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.gpu.inimage import bench_command, check_images, meaning, run_argv, run_in_image, worst


def runner_printing(lines: Sequence[str], code: int, seen: list[list[str]]) -> Runner:
    def stream(argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        seen.append(list(argv))
        for line in lines:
            on_line(line)
        return code

    def no_run(*_: Any, **__: Any) -> Any:
        raise AssertionError("nothing is run to completion here")

    return Runner(no_run, stream)


def test_gpus_are_requested_or_hidden_and_nothing_is_ever_pulled() -> None:
    never = ["docker", "run", "--rm", "--pull", "never"]
    passed = ["-e", "NCCL_NVLS_ENABLE", "-e", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "-e", "NVSHMEM_DISABLE_NVLS"]
    gpu_flags = ["--gpus", "all", "--shm-size", "1g", *passed]  # NCCL needs more /dev/shm than Docker's 64 MB
    assert run_argv("lab/x:v1", ["dl-smoke"], gpus=True) == [*never, *gpu_flags, "lab/x:v1", "dl-smoke"]
    hidden = run_argv("lab/x:v1", ["dl-smoke"], gpus=False)
    assert hidden == [*never, "-e", "NVIDIA_VISIBLE_DEVICES=void", "lab/x:v1", "dl-smoke"]


def test_an_image_that_is_not_local_is_a_usage_error_not_a_pull() -> None:
    # What Docker 20.10's engine answers `docker run --pull never` for an image it does not have (exit 125).
    said = ["docker: Error response from daemon: No such image: lab/never-built:x", "", "Run 'docker run --help'"]
    seen: list[list[str]] = []
    shown: list[str] = []
    code = run_in_image(
        runner_printing(said, 125, seen), "lab/never-built:x", ["dl-smoke"], gpus=True, on_line=shown.append
    )
    assert (code, meaning(code)) == (2, "usage error")
    assert shown[-1] == (
        "error: lab/never-built:x is not a local image (nothing was pulled): build it with `invoke build ...`, "
        "or `docker pull` it yourself if you trust where it comes from"
    )
    assert seen[0][3:5] == ["--pull", "never"]


def test_a_command_in_the_image_saying_no_such_image_keeps_its_code() -> None:
    code = run_in_image(
        runner_printing(["No such image: x"], 125, []), "lab/x:v1", ["dl-smoke"], gpus=True, on_line=print
    )
    assert code == 125


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("--help", "starts with '-' (docker would read it as an option)"),
        ("", "is empty"),
        ("lab/x:v1 --privileged", "has whitespace or characters outside printable ASCII"),
        ("lab/x\u0131:v1", "has whitespace or characters outside printable ASCII"),
        ("Lab/X:v1", "is not an image reference: lowercase path parts separated by '/', then an optional :tag"),
    ],
)
def test_an_image_docker_would_not_read_as_one_reference_is_refused_before_anything_runs(
    ref: str, problem: str
) -> None:
    seen: list[list[str]] = []
    with pytest.raises(InputError) as caught:
        run_in_image(runner_printing([], 0, seen), ref, ["dl-smoke"], gpus=True, on_line=print)
    (refused,) = caught.value.problems
    assert (refused.where, refused.message) == (f"--image {ref!r}", problem)
    assert seen == []


def test_every_bad_image_is_reported_at_once() -> None:
    with pytest.raises(InputError) as caught:
        check_images(["lab/x:v1", "--help", "", "lab/x:v1", "a b"])
    assert [p.where for p in caught.value.problems] == ["--image '--help'", "--image ''", "--image 'a b'"]
    assert check_images(["lab/x:v1", "127.0.0.1:5000/lab/x:v1", "lab/x:v1"]) == ["lab/x:v1", "127.0.0.1:5000/lab/x:v1"]


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


@pytest.mark.parametrize(
    ("batch_size", "modes", "gpus", "command"),
    [
        ("128,amp_fp16_cl=256", None, None, ["--batch-size=128", "--batch-size=amp_fp16_cl=256"]),
        ("64", "fp32,tf32", "1", ["--batch-size=64", "--modes=fp32,tf32", "--gpus=1"]),
        ("256", "bf16_cl", "all", ["--batch-size=256", "--modes=bf16_cl", "--gpus=all"]),
        ("bf16_cl=512", None, "2", ["--batch-size=bf16_cl=512", "--gpus=2"]),
    ],
)
def test_bench_passes_dl_benchs_flags_as_flag_equals_value(
    batch_size: str, modes: str | None, gpus: str | None, command: list[str]
) -> None:
    assert bench_command(batch_size, modes, gpus) == ["dl-bench", "--json", *command]


KNOWN = "(known: fp32, tf32, amp_fp16, amp_fp16_cl, bf16_cl, compile)"
BATCH = "must be a positive integer up to 65536, got "
GPUS = "must be a positive integer up to 1024, got "


@pytest.mark.parametrize(
    ("batch_size", "modes", "gpus", "problems"),
    [
        ("abc", None, None, [("--batch-size", f"{BATCH}'abc'")]),
        ("\uff11\uff12\uff18", None, None, [("--batch-size", f"{BATCH}'\uff11\uff12\uff18'")]),
        ("128,", None, None, [("--batch-size", f"{BATCH}''")]),
        ("fp64=128", None, None, [("--batch-size", f"fp64=128: unknown mode 'fp64' {KNOWN}")]),
        ("128", "fp64", None, [("--modes", f"unknown mode(s) fp64 {KNOWN}")]),
        ("128", None, "two", [("--gpus", f"{GPUS}'two'")]),
        ("128", None, "", [("--gpus", f"{GPUS}''")]),
        (
            "128",
            "fp32,tf32",
            "all",
            [("--modes", "--gpus runs DDP in one mode; got fp32, tf32 (give one with --modes)")],
        ),
        ("0", None, "x", [("--gpus", f"{GPUS}'x'"), ("--batch-size", f"{BATCH}'0'")]),
    ],
)
def test_bench_flags_are_checked_on_the_host_by_dl_benchs_own_parsers(
    batch_size: str, modes: str | None, gpus: str | None, problems: list[tuple[str, str]]
) -> None:
    # Before: only dl-bench in the container checked them, so on a host without a GPU a typo read "skipped, 77".
    with pytest.raises(InputError) as caught:
        bench_command(batch_size, modes, gpus)
    assert [(p.where, p.message) for p in caught.value.problems] == problems
