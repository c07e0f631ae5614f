"""Run an image's own commands (dl-smoke, dl-bench) in a throwaway container, and read their exit codes.

The exit codes are the payload's (dl_stack): 0 passed on a GPU, 1 failed, 2 usage error, 77 skipped (no GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from dlimages.payload.dl_stack import EXIT_FAILED, EXIT_PASSED, EXIT_SKIPPED, EXIT_USAGE
from dlimages.runner import Runner

EXIT_MEANING = {
    EXIT_PASSED: "passed",
    EXIT_FAILED: "FAILED",
    EXIT_USAGE: "usage error",
    EXIT_SKIPPED: "skipped: no GPU visible",
}
NO_GPU_RUNTIME = "could not select device driver"  # what `docker run --gpus` says without the NVIDIA runtime


def run_argv(image: str, command: Sequence[str], *, gpus: bool) -> list[str]:
    # Without --gpus, also hide GPUs from a host whose default runtime is nvidia (images set all).
    gpu_flags = ["--gpus", "all"] if gpus else ["-e", "NVIDIA_VISIBLE_DEVICES=void"]
    return ["docker", "run", "--rm", *gpu_flags, image, *command]


def run_in_image(
    runner: Runner, image: str, command: Sequence[str], *, gpus: bool, on_line: Callable[[str], None]
) -> int:
    """The command's exit code, its output streamed to `on_line`; a host without the NVIDIA container runtime
    is a skip (77), never a pass."""
    seen: list[str] = []

    def show(line: str) -> None:
        seen.append(line)
        on_line(line)

    code = runner.stream(run_argv(image, command, gpus=gpus), show)
    if gpus and code == 125 and any(NO_GPU_RUNTIME in line for line in seen):
        on_line(f"{image}: no NVIDIA container runtime on this host: skipped (exit 77), never a pass")
        return EXIT_SKIPPED
    return code


def meaning(code: int) -> str:
    return EXIT_MEANING.get(code, "error")


def worst(codes: Iterable[int]) -> int:
    """The exit code that speaks for several runs: any failure beats a skip, a skip beats a pass."""
    rank = {EXIT_PASSED: 0, EXIT_SKIPPED: 1}
    return max(codes, key=lambda code: rank.get(code, 2), default=EXIT_PASSED)
