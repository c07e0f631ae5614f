"""The offline Debian bases (`invoke base`), one for each OS of matrix.yaml with `bootstrap`: scripts/make-base.sh,
fed a flat repository that holds exactly the packages of its lock (images/base-<os>.apt.lock), fetched and checked
here (aptdebs) from this host's Debian mirror (Debian's own where the host's apt sources name none, as on GitHub's
Ubuntu runners) or from `--apt-from`.

Cells on such an OS start FROM its image; a build makes it first when the engine lacks it, or has one made from
another lock, since no registry can be reached to pull one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from dlimages.artifacts import oslock
from dlimages.building import aptdebs
from dlimages.building.mirrors import APT_SOURCES
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.runner import Runner

MAKE_BASE = "scripts/make-base.sh"


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


def make_base_argv(root: Path, repo: Path, lock: oslock.AptLock, image: str, *, check: bool = False) -> list[str]:
    """The command that makes the base `image` from the flat repository `repo` of `lock`'s packages (its OS, suite and
    public archives from the lock)."""
    distro = oslock.distro_of(lock)
    argv = ["bash", str(root / MAKE_BASE), "--repo", str(repo), "--lock-digest", lock.digest()]
    argv += ["--os", distro.os, "--suite", distro.codename, "--tag", image]
    # The image's own apt sources: the distribution's public archives, never this machine's mirror.
    argv += ["--archive", distro.public["debian"], "--security-archive", distro.public["debian-security"]]
    return [*argv, "--check"] if check else argv


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
