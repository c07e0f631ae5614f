"""Invoke tasks, the front door (`invoke build --cuda 11.8 --torch 2.1`; `invoke --list` for the rest): each calls
the dlimages.commands function of its name, whose keyword-only parameters are its flags (with their help), and
prints what the function returns. Rules live in the package."""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import Collection, Context, Task, task
from invoke.exceptions import Exit

from dlimages import commands
from dlimages.commands.flags import RUN_OPTIONS, FlagTask, flag_parameters, gather, refuse_core_options
from dlimages.commands.session import Failed, echo, reader_gone
from dlimages.core import errors
from dlimages.generate.project import Project, find_root

ROOT = find_root(Path(__file__).parent)  # the repository this tasks.py belongs to, wherever invoke runs it
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)  # progress, in order with builds


def command(*, honours: frozenset[str] = frozenset()) -> Callable[[Callable[..., None]], Task]:
    """@task for a body that calls the dlimages.commands function of its name, whose keyword-only parameters are
    the task's flags (their types, defaults and help declared there, once; a group of flags, such as the five cell
    flags, handed over as one value). An input problem exits 2 with one line each, Failed with its code: never a
    traceback; so does one of Invoke's core options (-R, -e, -w, ...) that the body would ignore: all but those it
    `honours` through `c.run`."""

    def decorate(body: Callable[..., None]) -> Task:
        function = getattr(commands, body.__name__)
        line = commands.task_line(function)

        @functools.wraps(body)
        def run(c: Context, **given: Any) -> None:
            try:
                refuse_core_options(c.config, line, {param.name for param in flags}, honours)
                body(c, **gather(function, given))
            except errors.InputError as error:
                raise Exit(error.report(), code=2) from None
            except Failed as failed:
                echo(failed.output)
                raise Exit(errors.redact(failed.message), code=failed.code) from None
            except BrokenPipeError:  # `invoke matrix | head`: the reader has what it wanted
                raise Exit(code=reader_gone()) from None
            except KeyboardInterrupt:  # Invoke would exit 1 and say nothing
                raise Exit(f"interrupted: `{line}` stopped before its end", code=130) from None

        flags = flag_parameters(function)
        run.__signature__ = inspect.Signature([inspect.Parameter("c", inspect.Parameter.POSITIONAL_ONLY), *flags])
        # auto_shortflags off: -h and --help, help in every task
        return task(klass=FlagTask, command=function, root=ROOT, auto_shortflags=False, positional=[])(run)

    return decorate


@command()
def matrix(c: Context, **flags: Any) -> None:
    """Show the valid cells of matrix.yaml (or, with --explain, what was excluded and why)."""
    echo(commands.matrix(Project(ROOT), **flags))


@command()
def render(c: Context, **flags: Any) -> None:
    """Render every cell's Dockerfile into images/ (deterministic; nothing written if validation fails)."""
    echo(commands.render(Project(ROOT, blocks=(commands.flags_block(ROOT),)), **flags))


@command()
def build(c: Context, **flags: Any) -> None:
    """Build the selected cells (--dry-run prints the commands and tags; --jobs N builds N at once with bake)."""
    echo(commands.build(Project(ROOT), **flags))


@command()
def bake(c: Context, **flags: Any) -> None:
    """Write a bake file (JSON) with the selected cells' builds, for any buildx builder to run in parallel."""
    echo(commands.bake(Project(ROOT), **flags))


@command()
def repro(c: Context, **flags: Any) -> None:
    """Prove a build reproducible: build it cold twice (or once --against an image) and name every difference."""
    echo(commands.repro(Project(ROOT), **flags))


@command()
def lock(c: Context, **flags: Any) -> None:
    """Resolve each selected cell's complete package set with hashes (uv) into images/<framework>/<cell>/*.lock."""
    echo(commands.lock(Project(ROOT), **flags))


@command()
def base(c: Context, **flags: Any) -> None:
    """Make the offline Debian bases from their locks (mmdebstrap, `docker load`, a fixed config: same ID)."""
    commands.base(Project(ROOT), **flags)


@command()
def apt_repo(c: Context, **flags: Any) -> None:
    """Copy every locked OS package (.deb, checked) into a folder: a repository for --apt-from, offline too."""
    echo(commands.apt_repo(Project(ROOT), **flags))


@command()
def bases_list(c: Context, **flags: Any) -> None:
    """List the base images the selected cells pull and the digests builds pin them to (--lock: refresh them)."""
    echo(commands.bases_list(Project(ROOT), **flags))


@command()
def bases_mirror(c: Context, **flags: Any) -> None:
    """Copy every base image the selected cells use into a registry of your own (skopeo, all layers, by digest)."""
    echo(commands.bases_mirror(Project(ROOT), **flags))


@command(honours=RUN_OPTIONS)  # not -R/--dry: it starts the engine before pytest
def test(c: Context, **flags: Any) -> None:
    """Run the image tests (pytest + testinfra) against built images."""
    commands.test(ROOT, c, **flags)


@command()
def push(c: Context, **flags: Any) -> None:
    """Push built images, verify each digest by pulling it back, sign and attest it, write the build report."""
    echo(commands.push(ROOT, **flags))


@command()
def verify(c: Context, **flags: Any) -> None:
    """Check an image's signature, its SBOM against its packages and its provenance; print the verified digest."""
    echo(commands.verify(ROOT, **flags))


@command()
def smoke(c: Context, **flags: Any) -> None:
    """GPU smoke test inside each image: CUDA visible, versions match labels, a real AMP training step."""
    echo(commands.smoke(ROOT, **flags))


@command()
def bench(c: Context, **flags: Any) -> None:
    """Synthetic ResNet-50 training benchmark inside the image (images/s, peak memory), as JSON."""
    commands.bench(ROOT, **flags)


@command()
def doctor(c: Context, **flags: Any) -> None:
    """Tell which images of the matrix will run on this GPU node (or on one described by --gpu/--driver), and how."""
    echo(commands.doctor(Project(ROOT), **flags))


@command()
def disk(c: Context, **flags: Any) -> None:
    """Where the engine keeps its data, what is free, what it holds, and the commands that give space back."""
    echo(commands.disk(ROOT, **flags))


@command()
def mirrors(c: Context, **flags: Any) -> None:
    """List the mirror profiles of matrix.yaml, and the Debian mirrors and CA bundle builds take from this host."""
    echo(commands.mirrors(Project(ROOT), **flags))


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


@command()
def package_diff(c: Context, **flags: Any) -> None:
    """Print, as Markdown, which pip and dpkg packages each cell's image changed between two sets of build reports."""
    print(commands.package_diff(**flags), end="")


bases = Collection("bases")
bases.add_task(bases_list, name="list", default=True)
bases.add_task(bases_mirror, name="mirror")
TOP = (matrix, render, build, bake, repro, lock, base, apt_repo, bases, test, push, verify, smoke, bench, doctor, disk)
namespace = Collection(*TOP, mirrors, check, ci, package_diff)
