#!/usr/bin/env python3
"""GPU smoke test run inside a dlimages image (installed as `dl-smoke`): prove that the
framework sees the GPU, was built with kernels for it, matches the cell's versions, loads cuDNN,
and can train a small convolutional model for a few mixed-precision steps on every GPU; on a node
with several GPUs (PyTorch), that NCCL all-reduces and DDP trains across all of them.

Standalone on purpose (stdlib, the framework, and beside it dl_stack.py, dl_command.py and its own
parts, dl_smoke_*.py): it is copied into images and also runs as a plain script on any host, so it
must not import dlimages. It stays compatible with Python 3.8, the oldest Python in the matrix.

Its parts, each imported as a sibling module: dl_smoke_errors (what error texts say), dl_smoke_rules
(the checks that need no framework), dl_smoke_training (the PyTorch work on the GPUs, in-process and in
one process per GPU), dl_smoke_pytorch and dl_smoke_tensorflow (each framework's probe). This file
holds the command: flags, the cell file, the report.

Exit codes: 0 passed on a GPU, 1 a check failed, 2 usage error, 77 skipped (no GPU visible).
A cuDNN that cannot be loaded, even one that keeps the framework from importing, is a failed check (1).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The modules it imports lie beside this file, in images (/usr/local/bin) as in the source tree. Run as a plain
# script there is no package and the script's own folder comes first on sys.path; imported as
# dlimages.payload.dl_smoke (and by mypy) they are the package's sibling modules.
if TYPE_CHECKING or __package__:
    from . import dl_command, dl_smoke_pytorch, dl_smoke_tensorflow, dl_stack
    from . import dl_smoke_errors as errors
    from . import dl_smoke_rules as rules
    from .dl_command import whole_number
else:
    import dl_command
    import dl_smoke_errors as errors
    import dl_smoke_pytorch
    import dl_smoke_rules as rules
    import dl_smoke_tensorflow
    import dl_stack
    from dl_command import whole_number

DEFAULT_CELL_FILE = "/etc/dlimages/cell.json"
CELL_KEYS = (
    "framework",
    "framework_version",
    "cuda",
    "cudnn",
    "python",
    "min_driver",
    "compat_driver",
    "forward_compat_branches",
    "cuda_arch_list",
)
# A framework answers to its name and to its flag: pytorch or torch, tensorflow or tf.
FRAMEWORK_ALIASES = {alias: f.name for f in dl_stack.FRAMEWORKS.values() for alias in (f.name, f.flag)}

# What `dl-smoke --help` says it does, before the exit codes.
SUMMARY = (
    "GPU smoke test: versions, arch coverage, cuDNN, and a short mixed-precision training step of a small conv model "
    "on every GPU; with several GPUs (PyTorch) also an NCCL all-reduce and a DDP step across all of them."
)
# A smoke test takes seconds; far more steps than this is a typo (or 10**30), a usage error rather than a long run.
MAX_STEPS = 10000


# ---------------------------------------------------------------------------------------------
# The cell's expectations and the report.
# ---------------------------------------------------------------------------------------------


def normalize_framework(name: str | None) -> str | None:
    if name is None:
        return None
    key = name.strip().lower()
    if key not in FRAMEWORK_ALIASES:
        raise dl_stack.UsageError("unknown framework {!r} (use {})".format(name, " or ".join(dl_stack.FRAMEWORKS)))
    return FRAMEWORK_ALIASES[key]


def validate_cell(data: Any, source: str) -> dict[str, Any]:
    """Check the types of the keys this script reads; report every problem at once.

    Other keys are left alone on purpose: cell.json is the renderer's full record of the cell
    (base image, tags, ...), whose schema the renderer validates; this script is one reader.
    """
    if not isinstance(data, dict):
        raise dl_stack.UsageError(f"{source}: expected a JSON object")
    problems = []
    for key in CELL_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if key == "forward_compat_branches":
            if not isinstance(value, list) or not all(isinstance(b, (str, int)) for b in value):
                problems.append('forward_compat_branches must be a list of driver branches like "470"')
        elif key == "cuda_arch_list":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                problems.append('cuda_arch_list must be a list of strings like "sm_90"')
            else:
                bad = [a for a in value if dl_stack.parse_arch(a) is None]
                if bad:
                    problems.append("cuda_arch_list has entries that are not archs: {}".format(", ".join(bad)))
        elif not isinstance(value, (str, int, float)):
            problems.append(f"{key} must be a string")
    if problems:
        raise dl_stack.UsageError("{}: {}".format(source, "; ".join(problems)))
    return {k: data[k] for k in CELL_KEYS if data.get(k) is not None}


def resolve_expectations(cell: dict[str, Any], args: argparse.Namespace) -> rules.Expectations:
    """Flags override the cell file; what neither gives stays None ("not checked")."""

    def pick(flag: str | None, key: str) -> str | None:
        if flag is not None:
            return flag
        value = cell.get(key)
        return None if value is None else str(value)

    arch_list = cell.get("cuda_arch_list")
    return rules.Expectations(
        framework=normalize_framework(pick(None, "framework")),
        framework_version=pick(args.expect_framework_version, "framework_version"),
        cuda=pick(args.expect_cuda, "cuda"),
        cudnn=pick(args.expect_cudnn, "cudnn"),
        python=pick(None, "python"),
        min_driver=pick(None, "min_driver"),
        cuda_arch_list=list(arch_list) if arch_list is not None else None,
        compat_driver=pick(None, "compat_driver"),
        forward_compat_branches=tuple(str(b) for b in cell.get("forward_compat_branches") or ()),
    )


def choose_framework(requested: str, expected: str | None) -> list[str]:
    """Frameworks to try in order: an explicit flag, else the cell's, else torch then TF."""
    if requested != "auto":
        return [requested]
    if expected is not None:
        return [expected]
    return list(dl_stack.FRAMEWORKS)


def build_report(framework: str, probe: rules.Probe, checks: Sequence[rules.Check]) -> dict[str, Any]:
    status, code = rules.decide_outcome(checks, probe.gpu_visible)
    return {
        "status": status,
        "exit_code": code,
        "framework": framework,
        "checks": [c._asdict() for c in checks],
        "gpus": probe.gpus,
        "versions": probe.versions,
    }


def render_human(report: dict[str, Any]) -> str:
    versions = report["versions"]
    lines = ["dl-smoke: {} {}".format(report["framework"], versions.get("framework") or "").rstrip()]
    width = max([len(c["name"]) for c in report["checks"]] + [8])
    for check in report["checks"]:
        lines.append("{:<4}  {:<{w}}  {}".format(check["status"].upper(), check["name"], check["detail"], w=width))
    lines.append("RESULT {} (exit {})".format(report["status"], report["exit_code"]))
    return "\n".join(lines)


# What each framework of dl_stack.FRAMEWORKS is probed with.
PROBES: dict[str, Callable[[ModuleType, rules.Expectations, rules.RunOptions, str | None], rules.Probe]] = {
    "pytorch": dl_smoke_pytorch.probe_torch,
    "tensorflow": dl_smoke_tensorflow.probe_tensorflow,
}


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = dl_command.command_parser("dl-smoke", SUMMARY, failed="failed")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--framework",
        choices=("auto", *dl_stack.FRAMEWORKS),
        default="auto",
        help="framework to test (default: the cell's, else whichever imports, PyTorch first)",
    )
    parser.add_argument(
        "--steps", type=whole_number, default=20, help=f"training steps (default 20, at least 6, at most {MAX_STEPS})"
    )
    parser.add_argument(
        "--channels-last", action="store_true", help="train the conv model in channels_last (NHWC) layout (PyTorch)"
    )
    parser.add_argument(
        "--no-multi-gpu",
        action="store_true",
        help="with several GPUs, test each alone: no NCCL all-reduce or DDP step across them",
    )
    parser.add_argument("--expect-cuda", metavar="X.Y", help="CUDA version the build must have")
    parser.add_argument("--expect-cudnn", metavar="VER", help="cuDNN version, compared by major.minor")
    parser.add_argument(
        "--expect-framework-version", metavar="V", help="framework version (prefix match: 2.11 matches 2.11.0+cu130)"
    )
    parser.add_argument(
        "--cell-file",
        metavar="PATH",
        help=f"JSON cell file with expectations (default {DEFAULT_CELL_FILE} if it exists)",
    )
    return parser


def load_cell(path: str | None) -> dict[str, Any]:
    """An explicit path must exist; the default path is optional."""
    if path is None:
        if not os.path.exists(DEFAULT_CELL_FILE):
            return {}
        path = DEFAULT_CELL_FILE
    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as error:
        raise dl_stack.UsageError(f"cannot read cell file {path}: {error.strerror}") from None
    except ValueError as error:
        raise dl_stack.UsageError(f"cell file {path} is not valid JSON: {error}") from None
    return validate_cell(data, path)


def import_framework(name: str) -> tuple[ModuleType | None, str]:
    """(module, "") or (None, why it did not import)."""
    if name == "tensorflow":
        # TF's C++ start-up chatter would bury the summary; errors still get through.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        module = __import__(dl_stack.FRAMEWORKS[name].modules[0])
    except Exception as error:  # a broken install raises OSError etc., not only ImportError
        return None, f"{type(error).__name__}: {dl_stack.first_line(str(error))}"
    return module, ""


def check_flags(args: argparse.Namespace) -> None:
    """Usage errors are exit 2 before anything runs: never a failed check (1) or, without a GPU, a skip (77)."""
    if args.steps < 6:
        raise dl_stack.UsageError("--steps must be at least 6 (the loss check compares 3 vs 3 steps)")
    if args.steps > MAX_STEPS:
        shown = str(args.steps) if len(str(args.steps)) <= 24 else str(args.steps)[:21] + "..."
        raise dl_stack.UsageError(f"--steps must be at most {MAX_STEPS}, got {shown}")
    for flag, value in (
        ("--expect-cuda", args.expect_cuda),
        ("--expect-cudnn", args.expect_cudnn),
        ("--expect-framework-version", args.expect_framework_version),
    ):
        if value is not None and not (
            value.isascii()
            and value.isprintable()
            and value[:1].isdigit()
            and " " not in value
            and dl_stack.parse_version(value)
        ):
            raise dl_stack.UsageError(f"{flag} {value!r} is not a version (e.g. 12.1 or 2.1.2)")


def import_failure_report(name: str, why: str, exp: rules.Expectations) -> dict[str, Any] | None:
    """The report for a framework that would not import because cuDNN could not be loaded; None for other causes.

    torch's libtorch_cuda.so needs libcudnn.so.N, so a missing cuDNN stops the import itself: a broken image
    (exit 1) that says so, not a usage error."""
    problem = errors.classify_cudnn_error(why)
    if problem is None or problem.kind != errors.CUDNN_LOAD:
        return None
    driver = dl_stack.read_driver_version()
    versions = rules.probe_versions(None, None, None, driver)
    detail = f"{errors.describe_cudnn_problem(problem)} (importing {dl_stack.FRAMEWORKS[name].modules[0]} failed)"
    checks = [*rules.common_checks(exp, driver), rules.Check(errors.CUDNN_LOAD, rules.FAIL, detail)]
    return build_report(name, rules.Probe(checks, [], versions, rules.host_has_gpu()), checks)


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_flags(args)
    exp = resolve_expectations(load_cell(args.cell_file), args)
    options = rules.RunOptions(args.steps, args.channels_last, not args.no_multi_gpu)
    candidates = choose_framework(args.framework, exp.framework)
    failures = []
    for name in candidates:
        module, why = import_framework(name)
        if module is None:
            report = import_failure_report(name, why, exp)
            if report is not None:
                return report
            failures.append(f"{name} ({why})")
            continue
        driver = dl_stack.read_driver_version()
        probe = PROBES[name](module, exp, options, driver)
        checks = rules.common_checks(exp, driver) + probe.checks
        if exp.framework is not None and exp.framework != name:
            checks.append(rules.Check("framework", rules.FAIL, f"cell expects {exp.framework}, testing {name}"))
        return build_report(name, probe, checks)
    raise dl_stack.UsageError("cannot import {}".format("; ".join(failures)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        report = run(args)
    except dl_stack.UsageError as error:
        return dl_command.usage_error(parser, error)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=False))
    else:
        print(render_human(report))
    return int(report["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
