"""The commands about this machine and the project's own checks: disk (the engine's data root), mirrors (the mirror
profiles and this host's), check (the gating checks) and ci (end to end, on an engine of its own)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

from invoke.context import Context

from dlimages.artifacts.ledger import Ledger
from dlimages.building import disk as data_disk
from dlimages.building.mirrors import HOST_PROFILE, NoDebianMirror, debian_mirrors
from dlimages.building.plan import default_ca_bundle
from dlimages.commands import ci_plan
from dlimages.commands.flags import Help, NoEngineSetup
from dlimages.commands.session import Failed, engine, say
from dlimages.core import usage
from dlimages.core.engines import Need
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.generate.project import Project


def disk(
    root: Path,
    *,
    need: Annotated[str, Help("exit 1 unless at least this many GB are free on the data root", "GB")] = "0",
    no_engine_setup: NoEngineSetup = False,
) -> str:
    """Where the engine keeps its data, what is free and what it holds, with the commands that give space back;
    Failed (exit 1, the report printed) when less than `need` GB is free."""
    needed = data_disk.need_from_flag(need)
    engine(root, no_engine_setup, need=Need.DOCKER)
    found = data_disk.data_root(RUNNER)
    if found is None:
        raise Failed("error: the Docker engine did not say where it keeps its data (`docker info` failed)", code=1)
    report = "\n".join(data_disk.describe(found, data_disk.system_df(RUNNER)))
    short = data_disk.shortfall(found, needed)
    if short:
        raise Failed(f"error: {short}", code=1, output=report)
    return report


def mirrors(
    project: Project,
    *,
    json_: Annotated[
        bool, Help("print JSON: each profile's description, and this host's Debian mirrors and CA bundle")
    ] = False,
) -> str:
    """The mirror profiles of matrix.yaml, and what builds here take from this host: the Debian mirrors of its apt
    sources (`--mirror host`, the offline bases' packages) and the CA bundle pip trusts. Scripts read `--json`."""
    main: str | None
    security: str | None
    try:
        main, security = debian_mirrors()
    except NoDebianMirror:  # an Ubuntu host, e.g. GitHub's runners
        main = security = None
    ca = default_ca_bundle()
    profiles = {name: profile.description for name, profile in project.matrix.mirrors.items()}
    if json_:
        host = {"debian": main, "debian_security": security, "ca_bundle": str(ca) if ca else None}
        return json.dumps({"profiles": profiles, "host": host}, indent=2)
    width = max(map(len, [*profiles, HOST_PROFILE]))
    lines = [f"{name:<{width}}  {text}" for name, text in profiles.items()]
    apt = f"{main}, {security}" if main else "none in its apt sources (Debian's own archives are used)"
    lines += [
        f"{HOST_PROFILE:<{width}}  this host's Debian mirrors: {apt}",
        f"CA bundle for pip in builds: {ca or 'none'}",
    ]
    return "\n".join(lines)


def check(root: Path, shell: Context) -> None:
    """Run the gating checks one after the other, each under a header; the first that fails ends the run."""
    for step in ci_plan.checks(root, sys.executable):
        say(f"\n##### {step.name}: {step.command}")
        shell.run(step.command, pty=False)


def ci(root: Path, shell: Context) -> None:
    """End to end on an engine of its own (deleted at the end, data root and all): each step under a header, with
    the free space after it, then the steps' times and, last, the image and GPU tests."""
    if os.geteuid() != 0:
        raise Failed(f"error: `{usage.CI}` starts an engine of its own and creates a user: run it as root", code=2)
    own = Path(tempfile.mkdtemp(prefix=ci_plan.ENGINE_PREFIX, dir=ci_plan.ENGINE_PARENT))
    # The host's /tmp is left as it was: every step's temporary files (chromium's profiles, torch's caches, uv's
    # locks, pytest's folders) go to a folder of this run, writable by all as /tmp is (the unprivileged user's steps
    # inherit TMPDIR), deleted at the end.
    scratch = Path(tempfile.mkdtemp(prefix=ci_plan.SCRATCH_PREFIX, dir=ci_plan.ENGINE_PARENT))
    scratch.chmod(0o1777)
    os.environ["TMPDIR"] = str(scratch)
    timings: list[tuple[str, float]] = []

    def run(steps: list[ci_plan.Step]) -> None:
        for step in steps:
            say(f"\n##### {step.name}: {step.command}")
            start = time.monotonic()
            shell.run(step.command, pty=False)
            timings.append((step.name, time.monotonic() - start))
            _say_free_space(step.name)

    try:
        # First the PyTorch cell on the containerd image store, on an engine of its own that is gone before the
        # classic store's engine starts (two dockerds would share one bridge).
        containerd = Path(tempfile.mkdtemp(prefix=ci_plan.ENGINE_PREFIX, dir=ci_plan.ENGINE_PARENT))
        os.environ["DOCKER_HOST"] = f"unix://{containerd}/docker.sock"
        try:
            run(ci_plan.containerd_leg(root, containerd))
        finally:
            for step in ci_plan.cleanup(root, containerd, ci_plan.CONTAINERD_REGISTRY_NAME):
                shell.run(step.command, warn=True, hide=True)
            with contextlib.suppress(OSError):
                containerd.rmdir()
        os.environ["DOCKER_HOST"] = f"unix://{own}/docker.sock"  # every step below, and the image tests
        run(ci_plan.end_to_end(root, own))
        say("\n" + "\n".join(f"{name:>50}: {seconds:7.1f} s" for name, seconds in timings))
        # Last, so that pytest's closing line is the run's verdict (GPU tests: skipped without a GPU, never passed).
        shell.run(ci_plan.image_tests(root, sys.executable, Ledger(root).built_refs()).command, pty=False)
    finally:
        for step in ci_plan.cleanup(root, own):
            shell.run(step.command, warn=True, hide=True)
        with contextlib.suppress(OSError):
            own.rmdir()  # still empty where the run stopped before its engine started (--stop-own takes a used one)
        shutil.rmtree(scratch, ignore_errors=True)


def _say_free_space(after: str) -> None:
    """One line per CI step, so that a run's disk use can be read from its log."""
    root = data_disk.data_root(RUNNER)
    if root is not None and root.free is not None:
        say(f"##### disk after {after}: {data_disk.gb(root.free)} free on {root.path}")
