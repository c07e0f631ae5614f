"""The offline Debian 12 base (`invoke base`): scripts/make-base.sh, fed this host's Debian mirror (Debian's own
public archive where the host's apt sources name none, as on GitHub's Ubuntu runners).

Cells whose OS is bootstrapped locally (matrix.yaml `os.*.bootstrap`) start FROM that image; a build makes it
first when the engine lacks it, since no registry can be reached to pull one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from dlimages.build.mirrors import APT_SOURCES, NoDebianMirror, debian_mirrors
from dlimages.core.errors import InputError, Problem
from dlimages.core.grammar import URL_ALLOWED, url_problem
from dlimages.core.runner import Runner

MAKE_BASE = "scripts/make-base.sh"
PUBLIC_MIRROR = "http://ftp.debian.org/debian"  # plain HTTP as apt uses it: the archive's signatures are checked
PUBLIC_SECURITY_MIRROR = "http://security.debian.org/debian-security"

log = logging.getLogger(__name__)


def make_base_argv(
    root: Path, mirror: str | None = None, *, check: bool = False, sources: Iterable[Path] = APT_SOURCES
) -> list[str]:
    """The command that makes the base: from `mirror`, else from this host's Debian mirror and security mirror,
    else (the host's apt sources name none) from Debian's public archive, saying so.

    Either URL is checked first (InputError): make-base.sh writes it into the base image's apt sources.
    """
    argv = ["bash", str(root / MAKE_BASE)]
    if mirror is not None:
        problem = url_problem(mirror)
        if problem is not None:
            raise InputError([Problem("--mirror", f"the URL {problem}", URL_ALLOWED)])
        argv += ["--mirror", mirror]
    else:
        try:
            main, security = debian_mirrors(sources)
        except NoDebianMirror:
            main, security = PUBLIC_MIRROR, PUBLIC_SECURITY_MIRROR
            log.info("note: this host's apt sources name no Debian mirror: the base comes from %s", PUBLIC_MIRROR)
        argv += ["--mirror", main, "--security-mirror", security]
    return [*argv, "--check"] if check else argv


def missing_bases(images: Iterable[str], runner: Runner) -> list[str]:
    """Of the locally made bases `images` (see plan.local_bases), those the engine does not have, each once."""
    return [image for image in dict.fromkeys(images) if not runner.image_exists(image)]
