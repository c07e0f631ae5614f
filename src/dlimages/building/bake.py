"""The bake document (docker-bake.json) for a set of build plans: the same builds `invoke build` runs, for any buildx
builder (the local engine, a remote BuildKit, a Kubernetes builder) to run in parallel.

Everything comes from each plan's own argv, read flag by flag: a flag this module does not know stops it, so the
bake file and `invoke build` cannot drift apart.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.building.plan import BuildPlan
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.grammar import count_problem
from dlimages.core.imagestore import Built
from dlimages.core.runner import Runner

BAKE_FILE = ".work/docker-bake.json"  # .work/ is ignored by git: a file in the tree would mark the next build -dirty
GROUP = "default"
# What `--provenance=false --sbom=false` says in a bake target: no attestation carries the build's own time.
_ATTESTATIONS = {"--provenance=false": "type=provenance,disabled=true", "--sbom=false": "type=sbom,disabled=true"}
# Flags of a plan's argv that belong to the run, not to the target: progress is the bake command's, what was built
# comes from bake's metadata file, and --load is the target's output.
_RUN_FLAGS = re.compile(r"--progress=.*")
_VALUE_FLAGS = ("--file", "--build-arg", "--secret", "--metadata-file", "--build-context")
_PREFIX = ("docker", "buildx", "build")


@dataclass(frozen=True)
class Target:
    """One bake target as read from a plan's argv."""

    name: str
    context: str
    dockerfile: str
    args: dict[str, str]
    secrets: list[str]
    attest: list[str]
    tags: list[str]
    output: list[str]
    contexts: dict[str, str]

    def document(self) -> dict[str, object]:
        return {
            **({"contexts": self.contexts} if self.contexts else {}),
            "context": self.context,
            "dockerfile": self.dockerfile,
            "args": dict(sorted(self.args.items())),
            "secret": self.secrets,
            "attest": self.attest,
            "tags": self.tags,
            "output": self.output,
        }


def target_name(plan: BuildPlan) -> str:
    """The cell's slug in bake's target grammar ([a-zA-Z0-9_-]): cuda11_8-torch2_1_2-py3_11-runtime."""
    return plan.cell.slug.replace(".", "_")


def target(plan: BuildPlan, *, tags: bool = True) -> Target:
    """The bake target that builds `plan` exactly as its argv does; `tags=False` leaves the tags off (`invoke build
    --jobs` applies them itself once the cell's build succeeded)."""
    argv = list(plan.build)
    if argv[: len(_PREFIX)] != list(_PREFIX):
        raise ValueError(f"not a buildx build command: {argv[:3]}")
    *flags, context = argv[len(_PREFIX) :]
    values: dict[str, list[str]] = {flag: [] for flag in _VALUE_FLAGS}
    attest: list[str] = []
    output: list[str] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        if flag in values:
            values[flag].append(flags[i + 1])
            i += 2
            continue
        if flag in _ATTESTATIONS:
            attest.append(_ATTESTATIONS[flag])
        elif flag == "--load":
            output.append("type=docker")
        elif flag.startswith("--output="):
            output.append(flag.removeprefix("--output="))
        elif not _RUN_FLAGS.fullmatch(flag):
            raise ValueError(f"the bake file has no equivalent for {flag!r} in {plan.cell.slug}'s build")
        i += 1
    if len(values["--file"]) != 1:
        raise ValueError(f"{plan.cell.slug}'s build names {len(values['--file'])} Dockerfiles")
    args = dict(pair.split("=", 1) for pair in values["--build-arg"])
    return Target(
        name=target_name(plan),
        context=context,
        # bake reads the Dockerfile relative to the context
        dockerfile=os.path.relpath(values["--file"][0], context),
        args=args,
        secrets=values["--secret"],
        attest=attest,
        tags=list(plan.cell.refs) if tags else [],
        output=output,
        contexts=dict(pair.split("=", 1) for pair in values["--build-context"]),
    )


def bake_document(
    plans: Sequence[BuildPlan],
    *,
    tags: bool = True,
    cache_from: Sequence[str] = (),
    cache_to: Sequence[str] = (),
) -> dict[str, object]:
    """The bake file for `plans`: one target per cell (named by `target_name`) in a `default` group, with the plans'
    build args, secrets (file paths, never their content), attestation settings, output and tags; `cache_from` /
    `cache_to` (e.g. `type=registry,ref=HOST/cache:TAG`) on every target."""
    targets: dict[str, Mapping[str, object]] = {}
    for plan in plans:
        bake_target = target(plan, tags=tags)
        body = bake_target.document()
        if cache_from:
            body["cache-from"] = list(cache_from)
        if cache_to:
            body["cache-to"] = list(cache_to)
        targets[bake_target.name] = body
    return {"group": {GROUP: {"targets": sorted(targets)}}, "target": dict(sorted(targets.items()))}


def render_bake(document: Mapping[str, object]) -> str:
    """The document as the file's text: sorted keys, two-space indent, a final newline (same input, same bytes)."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def bake_argv(bake_file: str, metadata_file: str, *, progress: str = "plain", no_cache: bool = False) -> list[str]:
    """The command that builds every target of `bake_file` and writes what each one built to `metadata_file`."""
    argv = ["docker", "buildx", "bake", "--file", bake_file, f"--progress={progress}", "--metadata-file", metadata_file]
    return argv + (["--no-cache"] if no_cache else [])


def built_images(metadata: Mapping[str, object], plans: Sequence[BuildPlan]) -> dict[str, Built]:
    """What each cell's build produced (slug -> its config and manifest digests), from bake's metadata file; a cell
    missing there was not built."""
    found = {plan.cell.slug: Built.of(metadata.get(target_name(plan))) for plan in plans}
    return {slug: built for slug, built in found.items() if built is not None}


CACHE_ALLOWED = "a buildx cache spec such as type=registry,ref=HOST[:PORT]/NAME:TAG (ASCII, no spaces or quotes)"
_CACHE_SPEC = re.compile(r"type=[a-z0-9]+(,[A-Za-z0-9_.-]+=[A-Za-z0-9_.:/@+-]+)*")
# The docker driver (the engine's own BuildKit) exports no cache but the one written into the image itself.
EXPORTS_CACHE_ONLY_INLINE = ("docker",)


def cache_problems(flag: str, value: str | None) -> list[Problem]:
    """What is wrong with a --cache-from/--cache-to value (nothing when none was given)."""
    if value is None or _CACHE_SPEC.fullmatch(value):
        return []
    return [Problem(flag, f"{value!r} is not a cache spec", CACHE_ALLOWED)]


def cache_export_problem(driver: str, cache_to: str | None) -> str | None:
    """Why the builder's `driver` cannot export `cache_to` (None when it can, or there is nothing to export)."""
    if cache_to is None or driver not in EXPORTS_CACHE_ONLY_INLINE or cache_to == "type=inline":
        return None
    return (
        f"--cache-to: the current buildx builder uses the {driver} driver, which exports no cache but "
        "type=inline; create a builder that can (`docker buildx create --use --driver docker-container`, or "
        "--driver remote/kubernetes), or drop --cache-to"
    )


# --- invoke build --jobs: how many cells one bake builds ------------------------------------------------------

MAX_JOBS = 64  # more cells at once than a builder runs; a typo such as 10**30 stays a usage error


def jobs_from_flags(jobs: str, cache_from: str | None, cache_to: str | None) -> int:
    """`invoke build --jobs` as typed (text: Invoke's own int() ends 'abc' in a traceback and reads '\uff11' as 1),
    checked with the cache flags that go with it; InputError naming every problem."""
    problems = cache_problems("--cache-from", cache_from) + cache_problems("--cache-to", cache_to)
    said = count_problem(jobs, 1, MAX_JOBS)
    if said is not None:
        problems.append(Problem("--jobs", said))
    elif int(jobs) == 1 and (cache_from or cache_to):
        problems.append(Problem("--cache-from/--cache-to", "only with --jobs 2 or more (they go to bake)"))
    if problems:
        raise InputError(problems)
    return int(jobs)


# --- invoke bake --out: where the bake file may go ------------------------------------------------------------

OUT_ALLOWED = f"a new file, a bake file `{usage.BAKE}` wrote, or any file under .work/ (default {BAKE_FILE})"
WORK_DIR = ".work"  # ignored by git: the repository's scratch folder
_MAX_BAKE_BYTES = 16 << 20  # far above the bake file of every cell of the matrix (a few hundred KB)


def out_problems(out: str, root: Path, runner: Runner) -> list[Problem]:
    """What keeps `invoke bake --out` from writing `out` (relative to the current folder): nothing empty, no
    folder, no file git tracks in the repository at `root` (`git ls-files`, through `runner`), no existing file
    but a bake file this task wrote or one under .work/, and a folder this process may write in. Checked before
    anything is planned or written."""

    def problem(message: str) -> list[Problem]:
        return [Problem("--out", f"{out!r} {message}", OUT_ALLOWED)]

    if not out.strip():
        return problem("is not a file name")
    if not out.isprintable():
        return problem("has a control character")
    path = Path(out)
    try:
        if path.is_dir():
            return problem("is a folder")
        if path.exists() and not path.is_file():
            return problem("is not a regular file (a device or a pipe)")
        resolved, top = path.resolve(), root.resolve()
        if resolved.is_relative_to(top) and _tracked(top, resolved.relative_to(top), runner):
            return problem("is a file git tracks: the bake file would overwrite it")
        if path.is_file() and not resolved.is_relative_to(top / WORK_DIR) and not _written_by_bake(path):
            return problem(f"exists and is not a bake file `{usage.BAKE}` wrote")
        folder = next(parent for parent in path.absolute().parents if os.path.lexists(parent))
        if not folder.is_dir():
            return problem(f"cannot be made: {folder} is a file, not a folder")
        if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
            return problem("cannot be written here: permission denied")
    except OSError as error:  # e.g. a name longer than the file system allows
        return problem(f"cannot be looked at: {error.strerror or error}")
    return []


def _tracked(root: Path, relative: Path, runner: Runner) -> bool:
    # Literal pathspecs: a name such as '*.yaml' asks about that name, not about every YAML file.
    done = runner(["git", "--literal-pathspecs", "-C", str(root), "ls-files", "--error-unmatch", "--", str(relative)])
    return done.ok  # 1: not tracked; 128: not a git checkout; 127: no git (nothing tracks it then)


def _written_by_bake(path: Path) -> bool:
    """Whether `path` holds a bake file as `render_bake` writes it (a `default` group and targets, nothing else)."""
    try:
        with path.open("rb") as handle:
            document = json.loads(handle.read(_MAX_BAKE_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(document, dict) or document.keys() != {"group", "target"}:
        return False
    return isinstance(document["group"], dict) and GROUP in document["group"]


def write_bake(out: str, document: Mapping[str, object]) -> None:
    """Write the bake file atomically; InputError naming --out when the system refuses what `out_problems` could
    not see coming (a read-only mount, a kernel file system, a full disk)."""
    try:
        write_atomic(Path(out), render_bake(document))
    except OSError as error:
        raise InputError([Problem("--out", f"{out!r} cannot be written: {error.strerror or error}")]) from None
