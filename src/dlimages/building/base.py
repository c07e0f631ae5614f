"""The offline Debian bases (`invoke base`), one for each OS of matrix.yaml with `bootstrap`: scripts/make-base.sh
makes the root file system's tarball (mmdebstrap, as root) from a flat repository that holds exactly the packages of
its lock (images/base-<os>.apt.lock), fetched and checked here (aptdebs) from this host's Debian mirror (Debian's own
where the host's apt sources name none, as on GitHub's Ubuntu runners) or from `--apt-from`; `load` writes it as a
docker-archive with a fixed config (imagearchive) and loads it, so the image ID follows from the tarball alone.

Cells on such an OS start FROM its image; a build makes it first when the engine lacks it, or has one made from
another lock, since no registry can be reached to pull one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from dlimages.artifacts import oslock
from dlimages.building import aptdebs
from dlimages.building.imagearchive import ImageConfig, write_docker_archive
from dlimages.building.mirrors import APT_SOURCES
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import config_digest, image_store
from dlimages.core.runner import Runner

MAKE_BASE = "scripts/make-base.sh"
OUT = Path(".work/base")  # the tarballs and archives, under the repository root
EPOCH = 1747699200  # SOURCE_DATE_EPOCH of every base: 2025-05-20T00:00:00Z (`created`, every mtime)


class BaseFailed(Exception):
    """The archive could not be written or loaded, or the engine holds another image than the one computed."""


def base_lock(
    root: Path, distro: oslock.Distro, apt_from: str | None, sources: Iterable[Path] = APT_SOURCES
) -> aptdebs.AptDebsSource:
    """The lock of the base of `distro` and where its files come from: `apt_from`, else this host's Debian mirrors,
    else Debian's own (InputError when there is no lock, or `apt_from` names nothing usable)."""
    path = oslock.base_lock_path(distro.os)
    lock = oslock.read(root / path)
    if lock is None:
        raise InputError([Problem(path, "missing", f"`{usage.LOCK} --upgrade-apt` writes it")])
    return aptdebs.AptDebsSource(lock, aptdebs.origin(apt_from, lock.resolved, aptdebs.host_mirrors(sources), distro))


def make_base_argv(root: Path, repo: Path, lock: oslock.AptLock, *, check: bool = False) -> list[str]:
    """The command that makes the root file system tarball of `lock`'s base from the flat repository `repo` of its
    packages (its OS, suite and public archives from the lock), as root."""
    distro = oslock.distro_of(lock)
    argv = ["bash", str(root / MAKE_BASE), "--repo", str(repo), "--os", distro.os, "--suite", distro.codename]
    argv += ["--out", str(root / OUT), "--epoch", str(EPOCH)]
    # The image's own apt sources: the distribution's public archives, never this machine's mirror.
    argv += ["--archive", distro.public["debian"], "--security-archive", distro.public["debian-security"]]
    return [*argv, "--check"] if check else argv


def created_by(lock: oslock.AptLock) -> str:
    """The image history's line for the layer: how it was made, with the lock's digest (a build sees a base made from
    another lock by it) and without mirrors or paths of this machine (it is part of the image ID)."""
    distro = oslock.distro_of(lock)
    return (
        f"mmdebstrap --mode=root --variant=essential --format=tar {distro.codename}, every package of "
        f"base-{distro.os}.apt.lock {lock.digest()} (merged-usr hook; man, doc, locale, info excluded; "
        f"SOURCE_DATE_EPOCH={EPOCH})"
    )


def load(root: Path, lock: oslock.AptLock, image: str, runner: Runner) -> list[str]:
    """make-base.sh's tarball written as a docker-archive and loaded as `image`; what was done, one line each.
    BaseFailed when the archive cannot be written or loaded, or the engine holds another config than computed."""
    os = oslock.distro_of(lock).os
    tarball, archive = root / OUT / f"{os}-minbase.tar", root / OUT / f"{os}-minbase.docker.tar"
    config = ImageConfig(created_by=created_by(lock))
    try:
        image_id = write_docker_archive(tarball, archive, tag=image, epoch=EPOCH, config=config)
    except (InputError, OSError) as error:
        raise BaseFailed(f"could not write the image archive {archive}: {error}") from None
    loaded = runner(["docker", "load", "-i", str(archive)], timeout=600)
    if not loaded.ok:
        raise BaseFailed(f"docker load -i {archive} failed: {loaded.last_line}")
    held = config_digest(image, runner, image_store(runner))
    if held != image_id:
        raise BaseFailed(f"docker load gave {image} the image config {held}, not {image_id} as computed")
    layer = runner.docker("image", "inspect", "--format", "{{index .RootFS.Layers 0}} {{.Size}}", image).out.split()
    diff_id, size = layer if len(layer) == 2 else ("?", "?")
    return [
        f"loaded {image}: image id {image_id} (the same for this tarball on every machine)",
        f"layer diff_id: {diff_id} (the tarball's sha256); image size: {size} bytes",
    ]


def missing_bases(
    images: Iterable[str], runner: Runner, locks: Mapping[str, oslock.AptLock] | None = None
) -> list[str]:
    """Of the locally made bases `images` (see plan.local_bases), those the engine does not have, or has made from
    another lock than theirs in `locks` (by image; its digest is in the image's history), each once."""
    wanted = []
    for image in dict.fromkeys(images):
        lock = (locks or {}).get(image)
        if not runner.image_exists(image):
            wanted.append(image)
        elif lock is not None:
            history = runner(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image])
            if history.ok and lock.digest() not in history.out:
                wanted.append(image)
    return wanted
