"""Invoke tasks: thin glue over the dlimages package (parse flags, call the package, print).

invoke matrix [--json] [--explain]     the valid cells, or why combinations were excluded
invoke render [--check]                write images/ from matrix.yaml + templates/, or verify it
invoke build --cuda 11.8 --torch 2.1 [--dry-run]
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from invoke import Context, task
from invoke.exceptions import Exit

from dlimages import doctor as node_doctor
from dlimages.builder import engine_problem, image_exists, run_builds, summary_table
from dlimages.buildplan import Secrets, default_ca_bundle, plan_build
from dlimages.cells import Selection, select
from dlimages.errors import InputError, Problem
from dlimages.mirrors import debian_mirrors, resolve
from dlimages.project import Project, find_root
from dlimages.render import render_tree, stale_files, write_tree
from dlimages.tables import cells_table, exclusions_text

LAST_BUILD = Path(".work/builds.json")  # the latest build result per cell, for `invoke test` and `invoke push`

F = TypeVar("F", bound=Callable[..., Any])

SELECT_HELP = {
    "cuda": "CUDA version, e.g. 11.8 (default: every CUDA version)",
    "torch": "PyTorch version; partial picks the newest patch, e.g. 2.1 -> 2.1.2",
    "tf": "TensorFlow version; partial picks the newest patch, e.g. 2.14 -> 2.14.1",
    "python": "Python version, e.g. 3.10 (default: the image's default Python where the cell has it)",
    "flavor": "runtime or devel (default: the image's default flavor)",
}


def _project() -> Project:
    return Project(find_root(Path(__file__).parent))


def reports_input_errors(body: F) -> F:
    """Turn input problems into one clear message each and exit code 2, never a traceback."""

    @functools.wraps(body)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return body(*args, **kwargs)
        except InputError as error:
            raise Exit(error.report(), code=2) from None

    return wrapper  # type: ignore[return-value]


def _selection(
    cuda: str | None, torch: str | None, tf: str | None, python: str | None, flavor: str | None
) -> Selection:
    if torch and tf:
        raise InputError([Problem("--torch/--tf", "choose one framework per build", "--torch X or --tf Y")])
    framework = "pytorch" if torch else "tensorflow" if tf else None
    return Selection(cuda=cuda, framework=framework, version=torch or tf, python=python, flavor=flavor)


@task(help={"json": "print a JSON array, one object per cell", "explain": "show every excluded combination and why"})
@reports_input_errors
def matrix(c: Context, json_: bool = False, explain: bool = False) -> None:
    """Show the valid cells of matrix.yaml (or, with --explain, what was excluded and why)."""
    project = _project()
    expansion = project.expansion
    if json_:
        print(json.dumps([cell.as_json() for cell in expansion.cells], indent=2))
    elif explain:
        print(exclusions_text(expansion.excluded))
        print(f"\n{len(expansion.cells)} valid cells, {len(expansion.excluded)} combinations excluded.")
    else:
        print(cells_table(expansion.cells))
        print(
            f"\n{len(expansion.cells)} valid cells; "
            f"`invoke matrix --explain` shows the {len(expansion.excluded)} excluded."
        )


@task(help={"check": "do not write; fail if images/ is stale or hand-edited"})
@reports_input_errors
def render(c: Context, check: bool = False) -> None:
    """Render every cell's Dockerfile into images/ (deterministic; nothing written if validation fails)."""
    project = _project()
    files = render_tree(project.root, project.matrix, project.expansion)
    if check:
        problems = stale_files(project.root, files)
        if problems:
            raise InputError(problems, heading=f"images/ is out of date ({len(problems)} files):")
        print(f"images/ is up to date ({len(files)} files).")
        return
    changed = write_tree(project.root, files)
    for change in changed:
        print(change)
    print(f"{len(changed)} of {len(files)} files changed.")


@task(
    help={
        **SELECT_HELP,
        "mirror": "mirror profile: none, tuna, aliyun, ustc (matrix.yaml) or host (this machine's apt mirror)",
        "dry_run": "print the exact docker commands and tags; touch nothing",
        "ca_bundle": "extra CA bundle for pip inside the build (a BuildKit secret); default: this host's bundle",
        "netrc": "netrc file with private-index credentials (a BuildKit secret)",
        "keep_going": "after a failed cell, build the remaining ones (the exit code still reports the failure)",
    }
)
@reports_input_errors
def build(
    c: Context,
    cuda: str | None = None,
    torch: str | None = None,
    tf: str | None = None,
    python: str | None = None,
    flavor: str | None = None,
    mirror: str = "none",
    dry_run: bool = False,
    ca_bundle: str | None = None,
    netrc: str | None = None,
    keep_going: bool = False,
) -> None:
    """Build the selected cells (--dry-run prints the commands and tags)."""
    project = _project()
    want = _selection(cuda, torch, tf, python, flavor)
    cells = select(project.matrix, project.expansion, want)
    secrets = Secrets(
        pip_ca=Path(ca_bundle) if ca_bundle else default_ca_bundle(), netrc=Path(netrc) if netrc else None
    )
    problems = [
        Problem(flag, f"no such file: {path}")
        for flag, path in (("--ca-bundle", secrets.pip_ca), ("--netrc", secrets.netrc))
        if path is not None and not path.is_file()
    ]
    if problems:
        raise InputError(problems)
    project_root = project.root
    workdir = Path(tempfile.gettempdir()) / "dlimages"
    plans = [
        plan_build(cell, resolve(project.matrix, mirror, cell), secrets, iidfile=workdir / f"{cell.slug}.iid")
        for cell in cells
    ]
    if dry_run:
        print("\n\n".join(plan.describe() for plan in plans))
        return
    problem = engine_problem()
    if problem:
        raise Exit(f"error: cannot build: {problem}", code=1)
    for cell in cells:
        if cell.bootstrap_base and not image_exists(cell.base_image):
            print(f"{cell.base_image} is missing: making it with `invoke base`")
            base(c)
    try:
        results = run_builds(plans, project_root, keep_going=keep_going)
    except KeyboardInterrupt:
        raise Exit(
            "interrupted: the cell being built was not tagged; earlier cells keep their tags", code=130
        ) from None
    built = {r.cell.slug for r in results}
    print("\n" + summary_table(results, [cell for cell in cells if cell.slug not in built]))
    _record_builds(project_root, [{"cell": r.cell.slug, "refs": list(r.cell.refs), "ok": r.ok} for r in results])
    if not all(r.ok for r in results) or len(results) < len(cells):
        raise Exit(code=1)


@task(
    help={
        "mirror": "Debian mirror URL to bootstrap from (default: read from this host's apt sources)",
        "check": "build the tarball twice and fail unless both are byte-identical",
    }
)
@reports_input_errors
def base(c: Context, mirror: str | None = None, check: bool = False) -> None:
    """Make the offline Debian 12 base image (mmdebstrap from an apt mirror, then docker import)."""
    root = _project().root
    args = ["bash", str(root / "scripts/make-base.sh")]
    if mirror:
        args += ["--mirror", mirror]
    else:
        main, security = debian_mirrors()
        args += ["--mirror", main, "--security-mirror", security]
    if check:
        args.append("--check")
    c.run(shlex.join(args), pty=False)


def _record_builds(root: Path, entries: list[dict[str, Any]]) -> None:
    """Remember what was built (latest result per cell), for `invoke test` and `invoke push`."""
    state = root / LAST_BUILD
    known = {e["cell"]: e for e in json.loads(state.read_text())} if state.is_file() else {}
    known.update({e["cell"]: e for e in entries})
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(list(known.values()), indent=2))


def _built_refs(root: Path, *, every_tag: bool = False) -> list[str]:
    """The immutable ref (or every ref) of each cell whose latest build succeeded."""
    state = root / LAST_BUILD
    if not state.is_file():
        return []
    entries = [entry for entry in json.loads(state.read_text()) if entry["ok"] and entry["refs"]]
    return [ref for entry in entries for ref in (entry["refs"] if every_tag else entry["refs"][:1])]


@task(
    iterable=["image"],
    help={"image": "image to test (repeatable); default: the images the last `invoke build` made"},
)
def test(c: Context, image: list[str]) -> None:
    """Run the image tests (pytest + testinfra) against built images."""
    root = _project().root
    images = image or _built_refs(root)
    if not images:
        raise Exit("error: --image: no image given and no successful `invoke build` recorded", code=2)
    flags = " ".join(f"--image {shlex.quote(ref)}" for ref in images)
    c.run(f"{shlex.quote(sys.executable)} -m pytest {root / 'tests/image'} -p no:cacheprovider -m image {flags}")


@task(
    iterable=["registry", "image"],
    help={
        "registry": "registry to push to, HOST[:PORT][/PATH] (repeatable)",
        "image": "local image ref to push (repeatable); default: every tag of the cells the last builds made",
        "report": "where to write the JSON build report (cell, tags, digest, size, package manifest)",
        "retries": "retries for transient failures (backoff doubles from 2 s)",
    },
)
@reports_input_errors
def push(
    c: Context, registry: list[str], image: list[str], report: str = ".work/build-report.json", retries: int = 3
) -> None:
    """Push built images to registries, verify each digest by pulling it back, write the build report."""
    from dlimages.push import PushError, build_report, image_manifest, push_image, write_report

    root = _project().root
    if not registry:
        raise InputError([Problem("--registry", "give at least one registry", "HOST[:PORT], e.g. 127.0.0.1:5000")])
    refs = image or _built_refs(root, every_tag=True)
    if not refs:
        raise InputError([Problem("--image", "no image given and no successful `invoke build` recorded")])
    try:
        results = push_image(refs, registry, retries=retries)
        manifests = {ref: image_manifest(ref) for ref in dict.fromkeys(r.ref for r in results)}
    except PushError as error:
        raise Exit(f"error: {error}\nNothing local was changed.", code=1) from None
    write_report(root / report, build_report(results, manifests))
    for result in results:
        print(f"pushed {result.remote_ref} {result.digest} (verified by pulling it back)")
    print(f"build report: {report}")


def _in_image(c: Context, image: str, command: str, gpus: bool) -> int:
    # Without --gpus, also hide GPUs from a host whose default runtime is nvidia (images set all).
    gpu_flag = "--gpus all " if gpus else "-e NVIDIA_VISIBLE_DEVICES=void "
    result = c.run(f"docker run --rm {gpu_flag}{shlex.quote(image)} {command}", warn=True, pty=False)
    assert result is not None
    if gpus and result.exited == 125 and "could not select device driver" in result.stderr:
        print(f"{image}: no NVIDIA container runtime on this host: skipped (exit 77), never a pass")
        return 77
    return int(result.exited)


EXIT_MEANING = {0: "passed", 1: "FAILED", 2: "usage error", 77: "skipped: no GPU visible"}


@task(
    iterable=["image"],
    help={"image": "image to smoke-test (repeatable)", "no_gpus": "run without --gpus all (expects exit 77)"},
)
def smoke(c: Context, image: list[str], no_gpus: bool = False) -> None:
    """GPU smoke test inside each image: CUDA visible, versions match labels, a real AMP training step."""
    if not image:
        raise Exit("error: --image: give at least one image", code=2)
    codes = {ref: _in_image(c, ref, "dl-smoke", gpus=not no_gpus) for ref in image}
    for ref, code in codes.items():
        print(f"{ref}: exit {code} ({EXIT_MEANING.get(code, 'error')})")
    worst = max(codes.values(), key=lambda code: {0: 0, 77: 1}.get(code, 2))
    if worst:
        raise Exit(code=worst)


@task(
    help={
        "image": "image to benchmark",
        "batch_size": "batch size, or MODE=N pairs, e.g. 128,amp_fp16_cl=256",
        "modes": "comma-separated modes (fp32,tf32,amp_fp16,amp_fp16_cl,bf16_cl,compile)",
    }
)
def bench(c: Context, image: str, batch_size: str = "128,amp_fp16_cl=256,bf16_cl=256", modes: str = "") -> None:
    """Synthetic ResNet-50 training benchmark inside the image (images/s, peak memory), as JSON."""
    args = " ".join(f"--batch-size {shlex.quote(b)}" for b in batch_size.split(","))
    if modes:
        args += f" --modes {shlex.quote(modes)}"
    code = _in_image(c, image, f"dl-bench --json {args}", gpus=True)
    if code:
        raise Exit(f"{image}: dl-bench exit {code} ({EXIT_MEANING.get(code, 'error')})", code=code)


@task(
    help={
        "gpu": "GPU architecture(s) of the node to ask about, e.g. sm_90 or 8.6,9.0 (with --driver)",
        "driver": "NVIDIA driver version of that node, e.g. 535.104.05 (with --gpu)",
        "json": "print a JSON array: each cell as `invoke matrix --json` gives it, plus runs and reasons",
    }
)
@reports_input_errors
def doctor(c: Context, gpu: str | None = None, driver: str | None = None, json_: bool = False) -> None:
    """Tell which images of the matrix will run on this GPU node (or on one described by --gpu/--driver)."""
    project = _project()
    node = node_doctor.node_from_flags(gpu, driver, node_doctor.probe_host)
    rows = node_doctor.report(project.expansion.cells, node)
    print(json.dumps(rows, indent=2) if json_ else node_doctor.format_report(rows, node))


# The cells CI builds for real on a Debian 12 machine without NVIDIA's or PyTorch's servers: both take
# CUDA from PyPI wheels on the locally made Debian base. TensorFlow goes through the host's apt mirror
# (`--mirror host`), PyTorch through upstream defaults (`--mirror none`), so both paths are exercised.
CI_BUILDS = (
    "--cuda 12.1 --torch 2.1 --python 3.11 --mirror none",
    "--cuda 11.8 --tf 2.14 --python 3.11 --mirror host",
)
CI_REGISTRY_PORT = 5055


@task
def check(c: Context) -> None:
    """The gating checks (README's test command, run by CI): lint, types, render check, unit and GPU tests."""
    root = _project().root
    python = shlex.quote(sys.executable)
    c.run(f"{python} -m ruff check {root}", pty=False)
    c.run(f"{python} -m mypy", pty=False)
    c.run("invoke render --check", pty=False)
    # GPU tests run too: on a machine without a GPU they are reported as skipped, never passed.
    c.run(f"{python} -m pytest {root / 'tests/unit'} {root / 'tests/gpu'} -p no:cacheprovider -rs", pty=False)


@task
def ci(c: Context) -> None:
    """End to end: engine, offline base, real builds of the CI cells, push to a local registry, image tests."""
    root = _project().root
    python = shlex.quote(sys.executable)
    steps: list[tuple[str, str]] = [
        ("engine", f"bash {root / '.ci/engine.sh'}"),
        ("checks", "invoke check"),
        *((f"build {flags}", f"invoke build {flags}") for flags in CI_BUILDS),
        ("registry", f"bash {root / '.ci/registry.sh'} start ci {CI_REGISTRY_PORT}"),
        ("push", f"invoke push --registry 127.0.0.1:{CI_REGISTRY_PORT} --report {root / '.work/build-report.json'}"),
    ]
    timings: list[tuple[str, float]] = []
    try:
        for name, command in steps:
            print(f"\n##### {name}: {command}", flush=True)
            start = time.monotonic()
            c.run(command, pty=False)
            timings.append((name, time.monotonic() - start))
    finally:
        c.run(f"bash {root / '.ci/registry.sh'} stop ci", warn=True, hide=True)
        # Rebuilds leave the previous images untagged (6 GB each): drop those, never a tagged image.
        c.run("docker image prune -f", warn=True, hide=True)
        print("\n" + "\n".join(f"{name:>40}: {seconds:7.1f} s" for name, seconds in timings), flush=True)
    # Last, so that pytest's closing line is the run's verdict: image tests (registries, built images,
    # Jupyter) and the GPU tests (skipped on a machine without a GPU, never passed).
    refs = " ".join(f"--image {shlex.quote(ref)}" for ref in _built_refs(root))
    c.run(f"{python} -m pytest {root / 'tests/image'} {root / 'tests/gpu'} -p no:cacheprovider -rs {refs}", pty=False)
