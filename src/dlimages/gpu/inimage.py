"""Run an image's own commands (dl-smoke, dl-bench) in a throwaway container, and read their exit codes.

The exit codes are the payload's (dl_stack): 0 passed on a GPU, 1 failed, 2 usage error, 77 skipped (no GPU).
Only local images run: every reference is checked first (`check_images`) and `docker run` never pulls, so a typo
or a name not built yet cannot fetch and run someone else's image from Docker Hub with the GPUs attached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.references import image_problems
from dlimages.core.runner import Runner
from dlimages.payload import dl_bench
from dlimages.payload.dl_stack import EXIT_FAILED, EXIT_PASSED, EXIT_SKIPPED, EXIT_USAGE, UsageError

EXIT_MEANING = {
    EXIT_PASSED: "passed",
    EXIT_FAILED: "FAILED",
    EXIT_USAGE: "usage error",
    EXIT_SKIPPED: "skipped: no GPU visible",
}
NO_GPU_RUNTIME = "could not select device driver"  # what `docker run --gpus` says without the NVIDIA runtime
NO_SUCH_IMAGE = "no such image"  # what `docker run --pull never` says (exit 125) for an image that is not local
DOCKER_RUN_FAILED = 125  # docker run's own failures, as opposed to the command's exit code


def check_images(refs: Iterable[str], where: str = "--image") -> list[str]:
    """The refs, once each, in order; InputError with one problem per ref docker would not read as an image."""
    wanted = list(dict.fromkeys(refs))
    problems = image_problems(wanted, where)
    if problems:
        raise InputError(problems)
    return wanted


def bench_command(batch_size: str, modes: str | None, gpus: str | None) -> list[str]:
    """dl-bench's command line for `invoke bench`, its flags checked first with dl-bench's own parsers, as its main()
    uses them (the payload can import nothing from this package; this package imports the payload's rules), so a
    usage error is exit 2 naming the flag before any engine, not "skipped, 77" from a host without a GPU.
    `batch_size`: comma-separated N or MODE=N; `modes`: comma-separated; `gpus`: N or all. Each is passed as
    FLAG=VALUE: a value such as --help stays a value, never becomes an option."""
    sizes = batch_size.split(",")
    problems: list[Problem] = []
    count: int | None = 1
    try:
        count = dl_bench.parse_gpus(gpus) if gpus is not None else 1
    except UsageError as error:
        problems.append(_bench_problem("--gpus", error))
    chosen = list(dl_bench.MODES)
    try:
        chosen = [dl_bench.multi_gpu_mode(modes, False)] if count != 1 else dl_bench.parse_modes(modes, False)
    except UsageError as error:
        problems.append(_bench_problem("--modes", error))
    try:
        default = dl_bench.DDP_BATCH_SIZE if count != 1 else dl_bench.DEFAULT_BATCH_SIZE
        dl_bench.parse_batch_sizes(sizes, chosen, default)
    except UsageError as error:
        problems.append(_bench_problem("--batch-size", error))
    if problems:
        raise InputError(problems)
    command = ["dl-bench", "--json", *(f"--batch-size={size}" for size in sizes)]
    command += [f"--modes={modes}"] if modes else []
    return command + ([f"--gpus={gpus}"] if gpus is not None else [])


BENCH_ALLOWED = {
    "--gpus": f"a number of GPUs from 1 to {dl_bench.MAX_GPUS}, or all",
    "--modes": "comma-separated modes; with --gpus other than 1, exactly one",
    "--batch-size": f"comma-separated N or MODE=N, N from 1 to {dl_bench.MAX_BATCH_SIZE}",
}


def _bench_problem(flag: str, error: UsageError) -> Problem:
    """dl-bench's own words, which start with the flag, after the flag."""
    said = str(error)
    return Problem(flag, said.removeprefix(flag).lstrip(": ") or said, BENCH_ALLOWED[flag])


# NCCL settings a node's operator may have set for a reason (NVLink multicast can take a host's GPUs out of service):
# passed into the container by name, so the in-image multi-GPU checks run as the node's own jobs would.
NCCL_PASSTHROUGH = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
# NCCL moves data between the processes of one node through /dev/shm; Docker's default 64 MB is too small for it.
SHM_SIZE = "1g"


def run_argv(image: str, command: Sequence[str], *, gpus: bool) -> list[str]:
    # Without --gpus, also hide GPUs from a host whose default runtime is nvidia (images set all).
    if gpus:
        gpu_flags = ["--gpus", "all", "--shm-size", SHM_SIZE]
        gpu_flags += [arg for name in NCCL_PASSTHROUGH for arg in ("-e", name)]
    else:
        gpu_flags = ["-e", "NVIDIA_VISIBLE_DEVICES=void"]
    return ["docker", "run", "--rm", "--pull", "never", *gpu_flags, image, *command]


def not_local(image: str) -> str:
    return (
        f"error: {image} is not a local image (nothing was pulled): build it with `{usage.BUILD} ...`, "
        "or `docker pull` it yourself if you trust where it comes from"
    )


def run_in_image(
    runner: Runner, image: str, command: Sequence[str], *, gpus: bool, on_line: Callable[[str], None]
) -> int:
    """The command's exit code, its output streamed to `on_line`; a host without the NVIDIA container runtime
    is a skip (77), never a pass; an image that is not local is a usage error (2), never pulled."""
    check_images([image])
    seen: list[str] = []

    def show(line: str) -> None:
        seen.append(line)
        on_line(line)

    code = runner.stream(run_argv(image, command, gpus=gpus), show)
    if code == DOCKER_RUN_FAILED and any(_docker_says(line, NO_SUCH_IMAGE) for line in seen):
        on_line(not_local(image))
        return EXIT_USAGE
    if gpus and code == DOCKER_RUN_FAILED and any(NO_GPU_RUNTIME in line for line in seen):
        on_line(f"{image}: no NVIDIA container runtime on this host: skipped (exit 77), never a pass")
        return EXIT_SKIPPED
    return code


def _docker_says(line: str, text: str) -> bool:
    """Whether the docker CLI itself (not the command in the container) printed `text` on this line."""
    lowered = line.lower()
    return lowered.startswith("docker:") and text in lowered


def meaning(code: int) -> str:
    return EXIT_MEANING.get(code, "error")


def worst(codes: Iterable[int]) -> int:
    """The exit code that speaks for several runs: any failure beats a skip, a skip beats a pass."""
    rank = {EXIT_PASSED: 0, EXIT_SKIPPED: 1}
    return max(codes, key=lambda code: rank.get(code, 2), default=EXIT_PASSED)
