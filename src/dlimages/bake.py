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

from dlimages.buildplan import BuildPlan
from dlimages.errors import Problem

BAKE_FILE = ".work/docker-bake.json"  # .work/ is ignored by git: a file in the tree would mark the next build -dirty
GROUP = "default"
# What `--provenance=false --sbom=false` says in a bake target: no attestation carries the build's own time.
_ATTESTATIONS = {"--provenance=false": "type=provenance,disabled=true", "--sbom=false": "type=sbom,disabled=true"}
# Flags of a plan's argv that belong to the run, not to the target: progress is the bake command's, the image ID
# comes from bake's metadata file, and --load is the target's output.
_RUN_FLAGS = re.compile(r"--progress=.*")
_VALUE_FLAGS = ("--file", "--build-arg", "--secret", "--iidfile")
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

    def document(self) -> dict[str, object]:
        return {
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
    words = argv[len(_PREFIX) :]
    *flags, context = words
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
    """The command that builds every target of `bake_file` and writes each one's image ID to `metadata_file`."""
    argv = ["docker", "buildx", "bake", "--file", bake_file, f"--progress={progress}", "--metadata-file", metadata_file]
    return argv + (["--no-cache"] if no_cache else [])


def image_ids(metadata: Mapping[str, object], plans: Sequence[BuildPlan]) -> dict[str, str]:
    """Each built cell's image ID (slug -> sha256:...), from bake's metadata file (`containerimage.config.digest`,
    the image ID on the docker driver); a cell missing there was not built."""
    found: dict[str, str] = {}
    for plan in plans:
        entry = metadata.get(target_name(plan))
        digest = entry.get("containerimage.config.digest") if isinstance(entry, Mapping) else None
        if isinstance(digest, str) and digest.startswith("sha256:"):
            found[plan.cell.slug] = digest
    return found


CACHE_ALLOWED = "a buildx cache spec such as type=registry,ref=HOST[:PORT]/NAME:TAG (ASCII, no spaces or quotes)"
_CACHE_SPEC = re.compile(r"type=[a-z0-9]+(,[A-Za-z0-9_.-]+=[A-Za-z0-9_.:/@+-]+)*")
# The docker driver (the engine's own BuildKit) exports no cache but the one written into the image itself.
EXPORTS_CACHE_ONLY_INLINE = ("docker",)


def cache_problems(flag: str, value: str | None) -> list[Problem]:
    """What is wrong with a --cache-from/--cache-to value (nothing when none was given)."""
    if value is None:
        return []
    if not _CACHE_SPEC.fullmatch(value):
        return [Problem(flag, f"{value!r} is not a cache spec", CACHE_ALLOWED)]
    return []


def cache_export_problem(driver: str, cache_to: str | None) -> str | None:
    """Why the builder's `driver` cannot export `cache_to` (None when it can, or there is nothing to export)."""
    if cache_to is None or driver not in EXPORTS_CACHE_ONLY_INLINE or cache_to == "type=inline":
        return None
    return (
        f"--cache-to: the current buildx builder uses the {driver} driver, which exports no cache but "
        "type=inline; create a builder that can (`docker buildx create --use --driver docker-container`, or "
        "--driver remote/kubernetes), or drop --cache-to"
    )
