"""Invoke tasks, the front door (`invoke build --cuda 11.8 --torch 2.1`; `invoke --list` for the rest): each calls
the dlimages.commands function of its name, whose keyword-only parameters are its flags, gives every flag its help
and prints what the function returns. Rules live in the package."""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from invoke import Collection, Context, Task, task
from invoke.exceptions import Exit

from dlimages import commands
from dlimages.building.bake import BAKE_FILE, MAX_JOBS
from dlimages.building.engine import NO_SETUP_HELP
from dlimages.building.mirrors import profile_help
from dlimages.commands.flags import CELL_HELP, EVERY_CELL_HELP, REGISTRY, RUN_OPTIONS, FlagTask, refuse_core_options
from dlimages.core import errors, usage
from dlimages.generate.lock import RESOLVE_TIMEOUT_S
from dlimages.generate.project import Project, find_root
from dlimages.model.tags import ORIGIN_HELP
from dlimages.publish.pushplan import MAX_RETRIES
from dlimages.publish.signing import PUSH_HELP, VERIFY_HELP

ROOT = find_root(Path(__file__).parent)  # the repository this tasks.py belongs to, wherever invoke runs it
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)  # progress, in order with builds

SHARED_HELP = {"no_engine_setup": NO_SETUP_HELP, "apt_from": usage.APT_FROM_HELP, **VERIFY_HELP}  # where a task has it
BUILD_HELP = {
    "mirror": profile_help(ROOT),
    "base_registry": f"take every base image from this registry (see `{usage.BASES_MIRROR}`)",
    "ca_bundle": "extra CA bundle for pip inside the build (a BuildKit secret); default: this host's bundle",
}


def command(
    *,
    help: Mapping[str, str] | None = None,
    cells: Mapping[str, str] = CELL_HELP,
    values: Mapping[str, str] | None = None,
    honours: frozenset[str] = frozenset(),
    **options: Any,
) -> Callable[[Callable[..., None]], Task]:
    """@task for a body that calls the dlimages.commands function of its name, whose keyword-only parameters are
    the task's flags (their types and defaults declared there, once; `cells` stands for the five cell flags, handed
    over as one CellFlags; `values`: what help calls a flag's value, where flags.PLACEHOLDERS says otherwise). An
    input problem exits 2 with one line each, Failed with its code: never a traceback; so does one of Invoke's core
    options (-R, -e, -w, ...) that the body would ignore: all but those it `honours` through `c.run`."""

    def decorate(body: Callable[..., None]) -> Task:
        function = getattr(commands, body.__name__)
        line = usage.invoke(body.__name__.replace("bases_", "bases.").replace("_", "-"))  # as typed

        @functools.wraps(body)
        def run(c: Context, **given: Any) -> None:
            try:
                refuse_core_options(c.config, line, {param.name for param in flags}, honours)
                body(c, **commands.CellFlags.take(given))
            except errors.InputError as error:
                raise Exit(error.report(), code=2) from None
            except commands.Failed as failed:
                commands.echo(failed.output)
                raise Exit(errors.redact(failed.message), code=failed.code) from None
            except BrokenPipeError:  # `invoke matrix | head`: the reader has what it wanted
                raise Exit(code=commands.reader_gone()) from None
            except KeyboardInterrupt:  # Invoke would exit 1 and say nothing
                raise Exit(f"interrupted: `{line}` stopped before its end", code=130) from None

        flags = commands.flag_parameters(function)
        run.__signature__ = inspect.Signature([inspect.Parameter("c", inspect.Parameter.POSITIONAL_ONLY), *flags])
        shared = {name: text for name, text in {**cells, **SHARED_HELP}.items() if name in {f.name for f in flags}}
        settings = {"auto_shortflags": False, "positional": [], **options}  # -h and --help: help in every task
        settings.update(klass=FlagTask, placeholders=values or {}, iterable=commands.repeatable(function))
        return task(help={**shared, **(help or {})}, **settings)(run)

    return decorate


@command(help=commands.generate.MATRIX_HELP)
def matrix(c: Context, **flags: Any) -> None:
    """Show the valid cells of matrix.yaml (or, with --explain, what was excluded and why)."""
    commands.echo(commands.matrix(Project(ROOT), **flags))


@command(help={"check": "do not write; fail if images/ is stale or hand-edited"})
def render(c: Context, **flags: Any) -> None:
    """Render every cell's Dockerfile into images/ (deterministic; nothing written if validation fails)."""
    commands.echo(commands.render(Project(ROOT), **flags))


@command(
    help={
        **BUILD_HELP,
        "dry_run": "print the exact docker commands and tags; touch nothing",
        "netrc": "netrc file with private-index credentials (a BuildKit secret)",
        "keep_going": "after a failed cell, build the remaining ones (the exit code still reports the failure)",
        "jobs": f"build N cells at once (1 to {MAX_JOBS}) through `docker buildx bake` on the current builder "
        "(default 1: one by one)",
        "cache_from": "with --jobs: import layers from this cache, e.g. type=registry,ref=HOST/NAME:cache",
        "cache_to": "with --jobs: export layers to this cache (type=registry,...: not on the docker driver, which "
        "exports only type=inline; use a docker-container, remote or kubernetes builder)",
        **commands.builds.BUILD_GUARD_HELP,
    },
)
def build(c: Context, **flags: Any) -> None:
    """Build the selected cells (--dry-run prints the commands and tags; --jobs N builds N at once with bake)."""
    commands.echo(commands.build(Project(ROOT), **flags))


@command(
    help={
        **BUILD_HELP,
        "netrc": "netrc file with private-index credentials (a BuildKit secret: the file names its path only)",
        "cache_from": "add this cache import to every target, e.g. type=registry,ref=HOST/NAME:cache",
        "cache_to": "add this cache export to every target (not on the docker driver but type=inline)",
        "out": f"the bake file to write (default {BAKE_FILE}; its paths are relative to the repository root): a new "
        f"file, one `{usage.BAKE}` wrote, or any under .work/; never a file git tracks",
    },
)
def bake(c: Context, **flags: Any) -> None:
    """Write a bake file (JSON) with the selected cells' builds, for any buildx builder to run in parallel."""
    commands.echo(commands.bake(Project(ROOT), **flags))


@command(
    help={
        **BUILD_HELP,
        "against": "compare one cold build with this image, not two: local, or REGISTRY/IMAGE@sha256:<64 hex> to pull",
        "dockerfile": "check any Dockerfile instead of a cell (built with the cells' reproducibility settings)",
        "context": "the build context for --dockerfile (default: the Dockerfile's folder)",
    },
)
def repro(c: Context, **flags: Any) -> None:
    """Prove a build reproducible: build it cold twice (or once --against an image) and name every difference."""
    commands.echo(commands.repro(Project(ROOT), **flags))


@command(
    cells=EVERY_CELL_HELP,
    help={
        "check": "resolve nothing; fail if a lock is stale or broken, or a PyPI-only cell has none",
        "upgrade_package": "let this package move to its newest allowed version (repeatable); others keep their pins",
        "timeout": f"seconds one cell may take to resolve (default {RESOLVE_TIMEOUT_S:g})",
        "prove": "resolve nothing; install each lock on its cell's Python, import the framework (fails if one cannot)",
        "upgrade_apt": "resolve only the OS package locks (the base's, each cell's apt.lock), to the newest packages",
    },
)
def lock(c: Context, **flags: Any) -> None:
    """Resolve each selected cell's complete package set with hashes (uv) into images/<framework>/<cell>/*.lock."""
    commands.echo(commands.lock(Project(ROOT), **flags))


@command(help=commands.BASE_HELP)
def base(c: Context, **flags: Any) -> None:
    """Make the offline Debian bases from their locks (mmdebstrap, `docker load`, a fixed config: same ID)."""
    commands.base(Project(ROOT), **flags)


@command(help={"to": "the folder to copy into (made if missing)"}, values={"to": "FOLDER"})
def apt_repo(c: Context, **flags: Any) -> None:
    """Copy every locked OS package (.deb, checked) into a folder: a repository for --apt-from, offline too."""
    commands.echo(commands.apt_repo(Project(ROOT), **flags))


@command(
    cells=EVERY_CELL_HELP,
    help={"lock": "ask each registry for the digest every base tag names now and record it in images/bases.lock.json"},
)
def bases_list(c: Context, **flags: Any) -> None:
    """List the base images the selected cells pull and the digests builds pin them to (--lock: refresh them)."""
    commands.echo(commands.bases_list(Project(ROOT), **flags))


@command(
    cells=EVERY_CELL_HELP,
    values={"to": REGISTRY},
    help={
        "to": "the registry to copy into; builds then take bases from it with --base-registry",
        "image": "also copy this image (repeatable): a local one from this engine, else from its registry",
        "dry_run": "print the skopeo commands; copy nothing",
    },
)
def bases_mirror(c: Context, **flags: Any) -> None:
    """Copy every base image the selected cells use into a registry of your own (skopeo, all layers, by digest)."""
    commands.echo(commands.bases_mirror(Project(ROOT), **flags))


@command(
    help={"image": f"image to test (repeatable); default: the images the last `{usage.BUILD}` made"},
    honours=RUN_OPTIONS,  # not -R/--dry: it starts the engine before pytest
)
def test(c: Context, **flags: Any) -> None:
    """Run the image tests (pytest + testinfra) against built images."""
    commands.test(ROOT, c, **flags)


@command(
    help={
        "registry": "registry to push to (repeatable)",
        "image": "local image ref to push (repeatable); default: every tag of the cells the last builds made",
        "report": "where to write the JSON build report (cell, tags, digest, sizes per layer as stored, packages)",
        "retries": f"retries for transient failures, 0 to {MAX_RETRIES} (backoff doubles from 2 s)",
        "force_overwrite": "replace another image a registry already has under an immutable tag (never needed for "
        "moving tags such as v1.0)",
        **ORIGIN_HELP,
        **PUSH_HELP,
    },
)
def push(c: Context, **flags: Any) -> None:
    """Push built images, verify each digest by pulling it back, sign and attest it, write the build report."""
    commands.echo(commands.push(ROOT, **flags))


@command(help={"image": "the image to verify: REGISTRY/REPOSITORY:TAG (pulled, resolved to its digest) or @sha256:..."})
def verify(c: Context, **flags: Any) -> None:
    """Check an image's signature, its SBOM against its packages and its provenance; print the verified digest."""
    commands.echo(commands.verify(ROOT, **flags))


@command(help={"image": "image to smoke-test (repeatable), as bench does", "no_gpus": "without --gpus all (exit 77)"})
def smoke(c: Context, **flags: Any) -> None:
    """GPU smoke test inside each image: CUDA visible, versions match labels, a real AMP training step."""
    commands.echo(commands.smoke(ROOT, **flags))


@command(
    help={
        "image": "image to benchmark; a registry's is verified first and run by digest",
        "batch_size": "batch size, or MODE=N pairs, e.g. 128,amp_fp16_cl=256",
        "modes": "comma-separated modes (fp32,tf32,amp_fp16,amp_fp16_cl,bf16_cl,compile)",
        "gpus": "all (or a number): also all-reduce bus bandwidth and DDP ResNet-50 scaling across GPUs (PyTorch)",
    },
)
def bench(c: Context, **flags: Any) -> None:
    """Synthetic ResNet-50 training benchmark inside the image (images/s, peak memory), as JSON."""
    commands.bench(ROOT, **flags)


@command(
    help={
        "gpu": "GPU model(s) or architecture(s) of the node, e.g. H100, 'RTX 4090,L40S', GB200, sm_90, 8.6,9.0",
        "driver": "NVIDIA driver of that node (with --gpu): a version, e.g. 535.104.05, or a branch such as R580",
        "brand": "GPU brand(s) as the container toolkit names them: tesla or nvidia (data-center), geforce, quadro, "
        "nvidiartx, ...; one for all or one each (default: read on this host; for --gpu: not data-center)",
        "toolkit": "the node's NVIDIA container toolkit version, e.g. 1.17.8, or none (default: read on this host)",
        "nodes": "judge a fleet: a YAML/JSON list of {name, gpu, driver[, brand, toolkit, cpu]} or `kubectl get nodes "
        "-o json` (GPU Feature Discovery's labels); a node-by-image table",
        "json": f"print a JSON array: each cell as `{usage.MATRIX_JSON}` gives it, plus runs, runs_through, reasons, "
        "needs_driver and run_notes",
    },
)
def doctor(c: Context, **flags: Any) -> None:
    """Tell which images of the matrix will run on this GPU node (or on one described by --gpu/--driver), and how."""
    commands.echo(commands.doctor(Project(ROOT), **flags))


@command(help={"need": "exit 1 unless at least this many GB are free on the data root"})
def disk(c: Context, **flags: Any) -> None:
    """Where the engine keeps its data, what is free, what it holds, and the commands that give space back."""
    commands.echo(commands.disk(ROOT, **flags))


@command(honours=RUN_OPTIONS | {"dry"})  # -R/--dry: the checks' commands printed, none run
def check(c: Context) -> None:
    """The gating checks: every linter (pre-commit), the render check, the unit and GPU tests."""
    commands.check(ROOT, c)


@command(honours=RUN_OPTIONS)
def ci(c: Context) -> None:
    """End to end, as CI runs it (README's test command): checks, real builds and pushes on an engine of its own.

    Then the user's commands as an unprivileged user, the image and GPU tests; the engine and its data root are
    deleted at the end."""
    commands.ci(ROOT, c)


@command(
    help={
        "before": "folder of the previous build reports (*.json, searched below it); missing or empty: no comparison",
        "after": f"folder of this build's reports (as `{usage.PUSH} --report` writes them)",
    },
)
def package_diff(c: Context, **flags: Any) -> None:
    """Print, as Markdown, which pip and dpkg packages each cell's image changed between two sets of build reports."""
    print(commands.package_diff(**flags), end="")


bases = Collection("bases")
bases.add_task(bases_list, name="list", default=True)
bases.add_task(bases_mirror, name="mirror")
TOP = (matrix, render, build, bake, repro, lock, base, apt_repo, bases, test, push, verify, smoke, bench, doctor, disk)
namespace = Collection(*TOP, check, ci, package_diff)
