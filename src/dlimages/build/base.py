"""The offline Debian 12 base (`invoke base`): scripts/make-base.sh, fed a flat repository that holds exactly the
packages of images/base-debian12.apt.lock, fetched and checked here (aptdebs) from this host's Debian mirror
(Debian's own where the host's apt sources name none, as on GitHub's Ubuntu runners) or from `--apt-from`.

Cells whose OS is bootstrapped locally (matrix.yaml `os.*.bootstrap`) start FROM that image; a build makes it
first when the engine lacks it, or has one made from another lock, since no registry can be reached to pull one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dlimages.build import aptdebs
from dlimages.build.mirrors import APT_SOURCES
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.runner import Runner
from dlimages.generate import aptlock

MAKE_BASE = "scripts/make-base.sh"


def base_lock(root: Path, apt_from: str | None, sources: Iterable[Path] = APT_SOURCES) -> aptdebs.AptDebsSource:
    """The base's lock and where its files come from: `apt_from`, else this host's Debian mirrors, else Debian's
    own (InputError when there is no lock, or `apt_from` names nothing usable)."""
    lock = aptlock.read(root / aptlock.BASE_APT_LOCK)
    if lock is None:
        raise InputError([Problem(aptlock.BASE_APT_LOCK, "missing", f"`{usage.LOCK} --upgrade-apt` writes it")])
    return aptdebs.AptDebsSource(lock, aptdebs.origin(apt_from, lock.resolved, aptdebs.host_mirrors(sources)))


def make_base_argv(root: Path, repo: Path, lock: aptlock.AptLock, *, check: bool = False) -> list[str]:
    """The command that makes the base from the flat repository `repo` of `lock`'s packages."""
    argv = ["bash", str(root / MAKE_BASE), "--repo", str(repo), "--lock-digest", lock.digest()]
    return [*argv, "--check"] if check else argv


def missing_bases(images: Iterable[str], runner: Runner, lock: aptlock.AptLock | None = None) -> list[str]:
    """Of the locally made bases `images` (see plan.local_bases), those the engine does not have, or has made from
    another lock than `lock` (its digest is in the image's history), each once."""
    wanted = []
    for image in dict.fromkeys(images):
        if not runner.image_exists(image):
            wanted.append(image)
        elif lock is not None:
            history = runner(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image])
            if history.ok and lock.digest() not in history.out:
                wanted.append(image)
    return wanted
