"""The exact docker commands that build and tag one cell: pure data, so a dry run shows the real thing."""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.artifacts import oslock
from dlimages.artifacts.baseslock import LOCK_FILE as BASES_LOCK_FILE
from dlimages.artifacts.baseslock import BaseLock
from dlimages.artifacts.layout import IMAGES_DIR
from dlimages.artifacts.pythonlock import installs_with_uv, lock_state
from dlimages.building import aptdebs, basesource
from dlimages.building.aptdebs import AptDebsSource
from dlimages.building.basesource import BaseChoice, BaseSource, choose, choose_all
from dlimages.building.mirrors import MirrorArgs, resolve
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import EXPORT
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell
from dlimages.model.selection import flags_for
from dlimages.model.spec import Matrix

UV_CONTEXT = Path(".work/uv")  # the build context `uv`, relative to the repository root (commands.builds.stage_uv)
UNKNOWN_REVISION = "unknown"  # what the label says when the source commit cannot be told
CA_BUNDLE_CANDIDATES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
CA_BUNDLE_ALLOWED = "a PEM bundle of CA certificates ('-----BEGIN CERTIFICATE-----' blocks)"
MAX_SECRET_BYTES = 16 * 2**20  # a full CA bundle is about 200 KiB
# `docker buildx build --secret id=...,src=PATH` is read as CSV: a comma or quote would change what PATH names.
_SECRET_PATH_UNSAFE = re.compile(r'[,"\x00-\x1f\x7f]')
BUILDKIT_PATH_ALLOWED = "a path without ',', '\"' or control characters (copy or link the file there)"
_NAMED_BY = "containerimage.config.digest (classic store) or containerimage.digest (containerd store)"


@dataclass(frozen=True)
class Secrets:
    """Files that enter the build as BuildKit secrets: never a layer, label, log line or history entry."""

    pip_ca: Path | None = None
    netrc: Path | None = None

    @classmethod
    def from_flags(cls, ca_bundle: str | None, netrc: str | None) -> Secrets:
        """The secrets the flags name, as absolute paths (the CA bundle defaults to this host's); InputError for
        every file the build could not use: missing, not a regular file, unreadable, over 16 MiB, a path
        `--secret` cannot carry, or (the CA bundle) no PEM certificate in it."""
        pip_ca = Path(ca_bundle).absolute() if ca_bundle else default_ca_bundle()
        secrets = cls(pip_ca, Path(netrc).absolute() if netrc else None)
        ca_flag = "--ca-bundle" if ca_bundle is not None else f"--ca-bundle (this host's default, {pip_ca})"
        problems: list[Problem] = []
        for flag, value, path, pem in (
            (ca_flag, ca_bundle, secrets.pip_ca, True),
            ("--netrc", netrc, secrets.netrc, False),
        ):
            if value == "":
                problems.append(Problem(flag, "is empty", "a file name"))
            else:
                problems += _secret_problems(flag, path, pem=pem)
        if problems:
            raise InputError(problems)
        return secrets

    def argv(self) -> list[str]:
        args: list[str] = []
        for name, path in (("pip_ca", self.pip_ca), ("netrc", self.netrc)):
            if path is not None:
                args += ["--secret", f"id={name},src={path}"]
        return args


def _secret_problems(flag: str, path: Path | None, *, pem: bool) -> list[Problem]:
    """What keeps the build from using `path` as a secret file (nothing when there is no path)."""
    if path is None:
        return []
    if _SECRET_PATH_UNSAFE.search(str(path)):
        return [Problem(flag, f"{str(path)!r} has a comma, quote or control character", BUILDKIT_PATH_ALLOWED)]
    if not path.exists():
        return [Problem(flag, f"no such file: {path}")]
    if not path.is_file():
        return [Problem(flag, f"{path} is not a regular file (a directory, device or pipe)", "a file")]
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as error:
        return [Problem(flag, f"cannot read {path}: {error.strerror or error}")]
    if len(data) > MAX_SECRET_BYTES:
        return [Problem(flag, f"{path} is larger than {MAX_SECRET_BYTES // 2**20} MiB")]
    if pem and PEM_CERTIFICATE not in data:
        return [Problem(flag, f"{path} holds no PEM certificate", CA_BUNDLE_ALLOWED)]
    return []


def default_ca_bundle() -> Path | None:
    """The CA bundle pip in the build should trust: the one this host's tools are told to use, if any."""
    for variable in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    return next((Path(p) for p in CA_BUNDLE_CANDIDATES if Path(p).is_file()), None)


@dataclass(frozen=True)
class BuildPlan:
    cell: Cell
    build: list[str]
    metadata_file: Path  # BuildKit's record of what it built (core.imagestore.Built): what the tags then name
    mirror: MirrorArgs
    base: BaseChoice
    notes: tuple[str, ...] = ()  # where the base comes from, what keeps this build from being reproducible
    apt: AptDebsSource | None = None  # None: the cell's apt step installs what the archive serves (no apt lock)
    uv: bool = False  # its locked pip steps run uv, from the build context `uv` (UV_CONTEXT, stage_uv)

    def build_arg(self, name: str) -> str:
        """The value the build passes for --build-arg `name` ("" when it passes none)."""
        prefix = f"{name}="
        words = [self.build[i + 1] for i, word in enumerate(self.build[:-1]) if word == "--build-arg"]
        return next((word[len(prefix) :] for word in words if word.startswith(prefix)), "")

    def tag_commands(self, local_id: str) -> list[list[str]]:
        """Tag the image the engine knows as `local_id` (core.imagestore.Built.local_id) with every ref."""
        return [["docker", "tag", local_id, ref] for ref in self.cell.refs]

    def describe(self) -> str:
        lines = [f"# {self.cell.image}:{self.cell.immutable_tag}"]
        lines += [f"# note: {note}" for note in (*self.mirror.notes, *self.notes)]
        lines.append(shlex.join(self.build))
        # The engine's name for the image, from the metadata file: the config digest on the classic store, the
        # manifest digest on the containerd store.
        lines.append(f"# then: IMAGE=the {_NAMED_BY} of {shlex.quote(str(self.metadata_file))}")
        lines += [f'docker tag "$IMAGE" {shlex.quote(ref)}' for ref in self.cell.refs]
        return "\n".join(lines)


def plan_build(
    cell: Cell,
    mirror: MirrorArgs,
    secrets: Secrets,
    *,
    base: BaseChoice | None = None,
    base_image: str | None = None,
    metadata_file: Path,
    revision: str = UNKNOWN_REVISION,
    epoch: int = 0,
    progress: str = "plain",
    notes: Sequence[str] = (),
    apt: AptDebsSource | None = None,
    uv: bool = False,
) -> BuildPlan:
    """Build without tags, BuildKit's metadata file saying what was built; tags are applied only once the build has
    succeeded.

    SOURCE_DATE_EPOCH (see `source_date_epoch`) stamps history, `created` and every file; no provenance or SBOM
    attestation, which would carry the build's own time. `base` (default: the cell's base as matrix.yaml names it)
    is what FROM pulls and what the org.opencontainers.image.base.* labels say; `base_image` is the short form
    for a pulled base given by reference (name or name@digest)."""
    if base is None and base_image is not None:
        name, _, digest = base_image.partition("@")
        base = BaseChoice(cell.slug, name, digest or None)
    base = base or BaseChoice(cell.slug, cell.base_image, local=cell.bootstrap_base)
    args = {
        "BASE_IMAGE": base.build_arg,
        "BASE_NAME": base.label_name,
        "BASE_DIGEST": base.digest or "",
        "SOURCE_DATE_EPOCH": str(epoch),
        "CREATED": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        "REVISION": revision,
        **mirror.build_args(),
    }
    argv = ["docker", "buildx", "build", f"--progress={progress}", EXPORT, "--provenance=false", "--sbom=false"]
    argv += ["--file", cell.dockerfile]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    argv += secrets.argv()
    if apt is not None:
        argv += ["--build-context", f"apt-debs={apt.folder}"]
    if uv:
        argv += ["--build-context", f"uv={UV_CONTEXT}"]
    argv += ["--metadata-file", str(metadata_file), IMAGES_DIR]
    return BuildPlan(cell, argv, metadata_file, mirror, base, tuple(notes), apt, uv)


def plan_builds(
    matrix: Matrix,
    cells: Sequence[Cell],
    profile: str,
    secrets: Secrets,
    workdir: Path,
    revision: str = UNKNOWN_REVISION,
    epochs: Mapping[str, int] | None = None,
    root: Path | None = None,
    bases: Mapping[str, BaseChoice] | None = None,
    source: BaseSource | None = None,
    apt_from: str | None = None,
) -> list[BuildPlan]:
    """One plan per cell with the mirror profile resolved for it; each build writes its metadata under workdir and
    labels the image with the source `revision` (see `source_revision`), its files stamped with `epochs[slug]`.

    `bases` (see building.basesource) says what each cell starts FROM; by default, with the repo `root`, the base
    as matrix.yaml names it pinned to the digest images/bases.lock.json records. A plan notes where its base comes
    from (`source`) and what keeps its build from being reproducible: a base with no digest, packages without a
    lock."""
    lock = BaseLock.load(root / BASES_LOCK_FILE) if root is not None else BaseLock({})
    source = source or BaseSource()
    plans = []
    for cell in cells:
        base = (bases or {}).get(cell.slug) or choose(cell, source, lock)
        notes = [*source.notes()] if source.applies(cell) else []
        notes += [cell.end_of_life_note] if cell.end_of_life_note else []
        if base.resolve:
            notes.append(f"{base.name}: its digest is asked of the registry just before the build (not in a dry run)")
        notes += [base.note] if base.note and root is not None else []
        locked = root is not None and lock_state(root, cell, matrix.packages.pip).locked
        if root is not None and not locked:
            notes.append(
                "this cell has no lock: pip resolves its packages at build time, so this build is NOT reproducible "
                f"(the image's label io.dlimages.locked says false); `{usage.LOCK} {flags_for(cell)}` where "
                f"{cell.install.index_url or cell.install.find_links or 'its index'} is reachable fixes that"
            )
        mirror = resolve(matrix, profile, cell)
        apt = apt_debs(root, cell, mirror, apt_from) if root is not None else None
        if apt is not None:
            notes.append(f"OS packages: the {len(apt.lock.debs)} of its apt.lock, from {apt.origin.describe()}")
        elif root is not None and apt_from not in (None, "archive"):
            notes.append(
                "--apt-from does not apply: this cell has no apt.lock, its apt step installs what the archive serves"
            )
        plans.append(
            plan_build(
                cell,
                mirror,
                secrets,
                base=base if root is not None or bases is not None else None,
                metadata_file=workdir / f"{cell.slug}.json",
                revision=revision,
                epoch=(epochs or {}).get(cell.slug, 0),
                notes=notes,
                apt=apt,
                uv=installs_with_uv(cell, locked),
            )
        )
    return plans


def apt_debs(root: Path, cell: Cell, mirror: MirrorArgs, apt_from: str | None) -> AptDebsSource | None:
    """The locked OS packages of the cell (None when it has no apt lock), fetched from `apt_from` (aptdebs.origin;
    the default: the build's own apt mirror)."""
    lock = oslock.read(root / IMAGES_DIR / cell.framework / cell.slug / oslock.APT_LOCK)
    if lock is None:
        return None
    distro = oslock.Distro.of(cell.os, cell.os_family, cell.os_codename)
    mirrors = aptdebs.mirrors_of(mirror.apt, mirror.apt_security, distro)
    if mirror.apt is None and distro.family == "debian":  # no mirror given: this host's, as `invoke base` takes
        mirrors = aptdebs.host_mirrors()
    return AptDebsSource(lock, aptdebs.origin(apt_from, lock.resolved, mirrors, distro))


def source_date_epoch(root: Path, cell: Cell, runner: Runner) -> int:
    """SOURCE_DATE_EPOCH for a cell: the time of the last commit that changed the cell's folder under images/ (its
    Dockerfile, locks and cell.json). The same commit always gives the same time, so builds are reproducible; and
    commits that leave the folder alone keep it, so they keep the build cache: a change to a shared asset (zshrc,
    dl-smoke) rebuilds only the step that installs it, not the 5 GB framework layer. 0 outside a git checkout."""
    folder = f"images/{cell.framework}/{cell.slug}"
    done = runner(["git", "-C", str(root), "log", "-1", "--format=%ct", "--", folder])
    if not done.ok or not done.out.strip():
        done = runner(["git", "-C", str(root), "log", "-1", "--format=%ct"])  # a cell not committed yet
    text = done.out.strip()
    return int(text) if done.ok and text.isdigit() else 0


def source_revision(root: Path, runner: Runner) -> str:
    """The commit the build comes from, for org.opencontainers.image.revision: the full hash, with "-dirty" when the
    tree has changes git does not ignore (such an image cannot be rebuilt from the commit alone); "unknown" outside
    a git checkout or without git."""
    head = runner(["git", "-C", str(root), "rev-parse", "--verify", "HEAD"])
    commit = head.out.strip()
    if not head.ok or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return UNKNOWN_REVISION
    status = runner(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=normal"])
    if not status.ok:
        return UNKNOWN_REVISION
    return f"{commit}-dirty" if status.out.strip() else commit


def plan_run(
    root: Path,
    matrix: Matrix,
    cells: Sequence[Cell],
    profile: str,
    secrets: Secrets,
    runner: Runner,
    *,
    workdir: Path,
    base_registry: str | None = None,
    resolve_bases: bool = True,
    apt_from: str | None = None,
) -> list[BuildPlan]:
    """The plans of one `invoke build`/`invoke repro` run from the checkout at `root`: source revision and epochs
    from git, bases from `--base-registry` or the profile's registry, pinned by the bases lock or (`resolve_bases`;
    not in a dry run) by asking that registry now. basesource.BaseUnavailable names the bases that cannot be had
    (`building.advice.bases_unavailable` says the ways out)."""
    source = BaseSource.from_flags(matrix, profile, base_registry)
    revision = source_revision(root, runner)
    epochs = {cell.slug: source_date_epoch(root, cell, runner) for cell in cells}
    choices = choose_all(cells, source, BaseLock.load(root / BASES_LOCK_FILE))
    if resolve_bases:
        choices = basesource.resolve(choices, runner)
    return plan_builds(matrix, cells, profile, secrets, workdir, revision, epochs, root, choices, source, apt_from)


def local_bases(plans: Sequence[BuildPlan]) -> list[str]:
    """The bases made here (`invoke base`) that the plans start FROM, each once."""
    return list(dict.fromkeys(plan.base.name for plan in plans if plan.base.local))
