"""Where each cell's base image comes from: the registry its name says (Docker Hub), a mirror profile's registry
(DaoCloud's prefix form), or a team's own registry (`--base-registry`); and what `invoke bases.mirror` copies there.

One rule maps a base to any registry prefix: PREFIX + "/" + its Docker Hub path, `ubuntu:22.04` ->
`PREFIX/library/ubuntu:22.04`, `nvidia/cuda:T` -> `PREFIX/nvidia/cuda:T` (the form DaoCloud's mirror and Harbor
projects use); a base named with another registry keeps that host as its first path part (lowercase, a port
after '_': `localhost:5000/lab/x:1` -> `PREFIX/localhost_5000/lab/x:1`). Deciding is pure
(`BaseSource`, `choose`, `mirror_copies`); `resolve` and `copy` run skopeo through a `Runner`.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts.baseslock import BaseLock, unpinned_warning
from dlimages.core import references
from dlimages.core.errors import InputError, Problem
from dlimages.core.grammar import REFERENCE_ALLOWED, reference_problem
from dlimages.core.references import DigestOutcome, registry_is_loopback, registry_of, registry_problems, split_tag
from dlimages.core.registry import Resolved, resolve_digest
from dlimages.core.runner import Runner
from dlimages.core.watch import Wait
from dlimages.model.cells import Cell
from dlimages.model.spec import Matrix

DOCKER_HUB, HUB_HOSTS = "docker.io", references.HUB_HOSTS
COPY_RETRIES = 3  # skopeo's own retries of a failed request, with its backoff
COPY_TIMEOUT_S = 3600.0  # one base (a CUDA devel image is about 4 GB compressed) over a slow link


def registry_path(ref: str) -> str:
    """The path a base gets under any registry prefix: its Docker Hub path (`library/` for official images), or,
    for a base named with another registry, that registry (as one path part: `_host_part`) and its path."""
    host = registry_of(ref)
    if host not in HUB_HOSTS:
        return f"{_host_part(host)}/{ref.split('/', 1)[1]}"
    name = ref.removeprefix(f"{host}/")
    return name if "/" in split_tag(name.split("@", 1)[0])[0] else f"library/{name}"


def _host_part(host: str) -> str:
    """A registry host as one path part of another registry's names, where docker's grammar allows lowercase
    letters, digits and '.', '_', '-' between them, and no ':' (skopeo refused `PREFIX/localhost:5000/x:1` as an
    invalid reference): lowercased (host names are case-insensitive), the port after '_' (a host name has no '_',
    so no other host reads the same), an IPv6 address written out in full with '-' between its groups."""
    name, port = host, ""
    if host.startswith("["):
        address, _, rest = host[1:].partition("]")
        port = rest.removeprefix(":")
        try:
            address = ipaddress.IPv6Address(address).exploded
        except ValueError:
            pass  # the reference check of the whole destination refuses what this leaves invalid
        name = "ipv6-" + address.replace(":", "-")
    elif ":" in host:
        name, _, port = host.rpartition(":")
    name = name.lower()
    return f"{name}_{port}" if port else name


def qualified(ref: str) -> str:
    """The fully qualified name of a registry base, as org.opencontainers.image.base.name wants it."""
    return ref if registry_of(ref) not in HUB_HOSTS else f"{DOCKER_HUB}/{registry_path(ref)}"


@dataclass(frozen=True)
class BaseSource:
    """Where the bases of one build run come from. With no `registry`, from where their names say; with one, every
    Docker Hub base as REGISTRY/<path>; `own` (--base-registry) takes the bases made here (`invoke base`) from it
    too, since a team's registry holds what `invoke bases.mirror` copied there."""

    registry: str | None = None
    origin: str = "their own registries"  # for messages: "--base-registry" or "mirror profile tuna (...)"
    own: bool = False
    limits: str = ""

    @classmethod
    def from_flags(cls, matrix: Matrix, profile: str, base_registry: str | None) -> BaseSource:
        """`--base-registry` wins over the profile's `bases`; InputError for a value docker could not use."""
        if base_registry is not None:
            problems = registry_problems(base_registry, where="--base-registry")
            if problems:
                raise InputError(problems)
            return cls(base_registry, "--base-registry", own=True)
        spec = matrix.mirrors.get(profile)
        if spec is None or spec.bases is None:
            return cls()
        origin = f"mirror profile {profile}, see {spec.bases.source}"
        return cls(spec.bases.registry, origin, limits=spec.bases.limits)

    def applies(self, cell: Cell) -> bool:
        if self.registry is None or "@" in cell.base_image:
            return False
        if cell.bootstrap_base:
            return self.own
        return registry_of(cell.base_image) in HUB_HOSTS or self.own

    def ref_for(self, cell: Cell) -> str:
        """The reference a build of `cell` pulls (before any digest)."""
        return f"{self.registry}/{registry_path(cell.base_image)}" if self.applies(cell) else cell.base_image

    def notes(self) -> tuple[str, ...]:
        if self.registry is None:
            return ()
        said = f"base images come from {self.registry} ({self.origin})"
        return (f"{said}: {self.limits}" if self.limits else said,)


@dataclass(frozen=True)
class BaseChoice:
    """What one build starts FROM: `name` (pulled, or local when `local`), pinned to `digest` when known."""

    cell: str  # slug
    name: str
    digest: str | None = None
    local: bool = False  # made on this machine by `invoke base`: never pulled, no registry digest
    resolve: bool = False  # ask the registry for the digest before building (a base registry, nothing recorded)
    note: str | None = None  # what keeps the build from being reproducible

    @property
    def build_arg(self) -> str:
        """BASE_IMAGE: name@digest when pinned, else the name."""
        return f"{self.name}@{self.digest}" if self.digest else self.name

    @property
    def label_name(self) -> str:
        return self.name if self.local else qualified(self.name)


def choose(cell: Cell, source: BaseSource, lock: BaseLock) -> BaseChoice:
    """The base `cell` builds from. A mirror serves a base under the digest upstream gave it (DaoCloud keeps
    digests; `invoke bases.mirror` copies with --preserve-digests), so a digest the bases lock records pins the
    mirrored copy too; a base with none is resolved at the registry before the build (`resolve`)."""
    if "@" in cell.base_image:  # pinned by matrix.yaml itself
        name, pinned = cell.base_image.split("@", 1)
        return BaseChoice(cell.slug, name, pinned)
    digest = lock.digests.get(cell.base_image)
    if source.applies(cell):
        return BaseChoice(cell.slug, source.ref_for(cell), digest, resolve=digest is None)
    if cell.bootstrap_base:
        return BaseChoice(cell.slug, cell.base_image, local=True)
    return BaseChoice(cell.slug, cell.base_image, digest, note=None if digest else unpinned_warning(cell.base_image))


def choose_all(cells: Iterable[Cell], source: BaseSource, lock: BaseLock) -> dict[str, BaseChoice]:
    """Each cell's base; InputError, naming where the registry came from, for a name under it that docker would
    refuse (e.g. longer than 255 characters)."""
    choices = {cell.slug: choose(cell, source, lock) for cell in cells}
    by_base = {cell.base_image: choices[cell.slug].name for cell in cells if source.applies(cell)}
    problems = [
        Problem(source.origin, f"with {base} makes {_shown(name)}, which {problem}", REFERENCE_ALLOWED)
        for base, name in by_base.items()
        if (problem := reference_problem(name)) is not None
    ]
    if problems:
        raise InputError(problems)
    return choices


class BaseUnavailable(Exception):
    """Bases that cannot be had from where the build would pull them: `failed` maps each to its cell's slug and what
    the registry said; the message (building.plan's, with the ways out) says which, where, and what to do."""

    def __init__(self, failed: Mapping[str, tuple[str, str]], message: str = "") -> None:
        super().__init__(message or "\n".join(f"error: {name}: {problem}" for name, (_, problem) in failed.items()))
        self.failed = failed


def resolve(choices: Mapping[str, BaseChoice], runner: Runner) -> dict[str, BaseChoice]:
    """Ask the base registry for each base's digest that nothing records yet (once per base), so that the build
    pulls tag@digest and the image's labels name it. BaseUnavailable, before anything is built, when the
    registry does not have a base or cannot be reached."""
    asked: dict[str, Resolved] = {}
    for choice in choices.values():
        if choice.resolve and choice.name not in asked:
            asked[choice.name] = resolve_digest(choice.name, runner)
    failed = {
        c.name: (c.cell, str(asked[c.name].problem))
        for c in choices.values()
        if c.name in asked and not asked[c.name].ok
    }
    if failed:
        raise BaseUnavailable(failed)
    return {
        slug: BaseChoice(slug, c.name, asked[c.name].digest, c.local) if c.resolve else c for slug, c in choices.items()
    }


# --- copying the bases into a registry of one's own -----------------------------------------------------------


@dataclass(frozen=True)
class Copy:
    """One image to copy: from a registry (`docker://`, every platform, digests kept) or from this engine
    (a base made here or an image built here, through `docker image save`) to REGISTRY/<path>:<tag>."""

    source: str  # the reference read (a tag, tag@digest, or a local image)
    destination: str
    local: bool = False

    def commands(self, workdir: Path) -> list[list[str]]:
        """The commands that make the copy, in order; the digest the registry serves it under ends up in
        workdir/copy.digest. A local image goes through a `docker image save` archive: skopeo's own
        docker-daemon transport speaks Docker API 1.22 (skopeo 1.9, Debian 12), which Docker 25+ refuses."""
        copy = ["skopeo", "copy", "--retry-times", str(COPY_RETRIES), "--digestfile", str(workdir / "copy.digest")]
        copy.append(f"--dest-tls-verify={_tls(self.destination)}")
        if not self.local:
            # --all with --preserve-digests: the copy is byte for byte, so tag@digest pins it as it pinned upstream.
            source = f"docker://{by_digest(self.source)}"
            copy += ["--all", "--preserve-digests", f"--src-tls-verify={_tls(self.source)}", source]
            return [[*copy, f"docker://{self.destination}"]]
        archive = workdir / "copy.tar"
        save = ["docker", "image", "save", "--output", str(archive), self.source]
        return [save, [*copy, f"docker-archive:{archive}", f"docker://{self.destination}"]]


def _tls(ref: str) -> str:
    return "false" if registry_is_loopback(ref) else "true"


def _shown(ref: str) -> str:
    return repr(ref) if len(ref) <= 100 else f"a name of {len(ref)} characters"


def by_digest(ref: str) -> str:
    """`name:tag@digest` as skopeo takes it, `name@digest`: containers/image refuses a reference with both ("Docker
    references with both a tag and digest are currently not supported"), and the digest alone names the same bytes."""
    name, at, digest = ref.partition("@")
    return f"{split_tag(name)[0]}@{digest}" if at else ref


def mirror_destination(to: str, ref: str) -> str:
    """Where `invoke bases.mirror --to TO` copies `ref`: TO/<path>:<tag> (`registry_path`), or, for a reference by
    digest alone, TO/<path>@<digest>: skopeo makes `:latest` of a name without either, and a copy with
    --preserve-digests is served under the digest it had."""
    name, at, digest = ref.partition("@")
    path = registry_path(name)
    return f"{to}/{path}@{digest}" if at and split_tag(name)[1] is None else f"{to}/{path}"


def mirror_copies(
    cells: Iterable[Cell], to: str, lock: BaseLock, extra: Iterable[str], local: Callable[[str], bool]
) -> list[Copy]:
    """What `invoke bases.mirror --to` copies: each base the cells use (by its recorded digest when there is one;
    the bases made here from this engine), then each `extra` image (from this engine when `local(ref)` says it is
    there and `ref` names no digest, else from its registry), each to `mirror_destination`, each once. InputError
    for a destination docker would refuse (e.g. longer than 255 characters), before skopeo is asked."""
    problems = registry_problems(to, where="--to")
    if problems:
        raise InputError(problems)
    target = BaseSource(to, "--to", own=True)
    copies: dict[str, Copy] = {}
    for cell in cells:
        if "@" in cell.base_image and not cell.bootstrap_base:
            name = cell.base_image.split("@", 1)[0]
            copies.setdefault(name, Copy(cell.base_image, mirror_destination(to, cell.base_image)))
        else:
            pinned = lock.pinned(cell.base_image)
            copies.setdefault(
                cell.base_image,
                Copy(pinned or cell.base_image, target.ref_for(cell), local=cell.bootstrap_base),
            )
    for ref in extra:
        name, at, _ = ref.partition("@")
        if split_tag(name)[1] is None and not at:
            raise InputError([Problem(f"--image {ref!r}", "has no :tag or @digest", "an image reference with either")])
        # A digest names what a registry serves; an archive of this engine's copy would be re-encoded under another.
        copies.setdefault(ref, Copy(ref, mirror_destination(to, ref), local=not at and local(ref)))
    problems = [
        Problem("--to", f"with {item.source} makes {_shown(item.destination)}, which {problem}", REFERENCE_ALLOWED)
        for item in copies.values()
        if (problem := reference_problem(item.destination)) is not None
    ]
    if problems:
        raise InputError(problems)
    return list(copies.values())


@dataclass(frozen=True)
class Copied(DigestOutcome):
    copy: Copy
    seconds: float
    digest: str | None = None
    problem: str | None = None

    def __str__(self) -> str:
        if self.digest is None:
            return f"NOT copied {self.copy.source} -> {self.copy.destination}: {self.problem}"
        served = self.copy.destination if "@" in self.copy.destination else f"{self.copy.destination}@{self.digest}"
        return f"copied {self.copy.source} -> {served} ({self.seconds:.0f} s)"


def copy(item: Copy, runner: Runner, workdir: Path, on_line: Callable[[str], None]) -> Copied:
    """Make one copy, streaming skopeo's progress; the digest the registry now serves it under, or why not. The
    archive of a local image is removed afterwards, whatever happened."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "copy.digest").unlink(missing_ok=True)
    tail: list[str] = []

    def show(line: str) -> None:
        on_line(f"  {line}")
        tail[:] = [*tail[-19:], line]

    start = time.monotonic()
    try:
        for argv in item.commands(workdir):
            if argv[0] == "skopeo":  # a registry on the other end: watched, as it can fall silent
                wait = Wait(f"copying {item.source}", registry_of(item.destination), COPY_TIMEOUT_S)
                done = runner.watched(argv, wait)
                for line in done.out.splitlines():
                    show(line)
                code = 1 if done.hung else done.code
                tail.append(done.err if done.hung else "")
            else:
                code = runner.stream(argv, show)
            if code != 0:
                said = next((line for line in reversed(tail) if line.strip()), "no output")
                return Copied(item, time.monotonic() - start, problem=f"{argv[0]} exited {code}: {said}")
    finally:
        (workdir / "copy.tar").unlink(missing_ok=True)
    digestfile = workdir / "copy.digest"
    digest = digestfile.read_text().strip() if digestfile.is_file() else ""
    if not digest:
        return Copied(item, time.monotonic() - start, problem="skopeo wrote no digest")
    return Copied(item, time.monotonic() - start, digest)
