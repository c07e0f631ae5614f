"""Resolve a mirror profile into the build arguments one cell needs, saying what each operator lacks."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dlimages.core.errors import InputError, Problem, allowed_list
from dlimages.core.grammar import URL_ALLOWED, url_problem
from dlimages.model.cells import Cell
from dlimages.model.spec import MATRIX_FILE, Matrix, load_matrix

HOST_PROFILE = "host"  # resolved at build time from this machine's own apt configuration
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


def _build_arg(name: str) -> Any:
    """A field that reaches the build as `--build-arg NAME=VALUE`, unless it is None."""
    return field(default=None, metadata={"build_arg": name})


@dataclass(frozen=True)
class MirrorArgs:
    """Build arguments for one cell; None leaves the upstream default in the Dockerfile."""

    profile: str
    apt: str | None = _build_arg("APT_MIRROR")
    apt_security: str | None = _build_arg("APT_SECURITY_MIRROR")
    pip_index: str | None = _build_arg("PIP_INDEX_URL")
    torch_index: str | None = _build_arg("TORCH_INDEX_URL")
    torch_find_links: str | None = _build_arg("TORCH_FIND_LINKS")
    notes: tuple[str, ...] = field(default=())

    def build_args(self) -> dict[str, str]:
        args = {"MIRROR_PROFILE": self.profile}
        for arg in fields(self):
            value = getattr(self, arg.name)
            if "build_arg" in arg.metadata and value is not None:
                args[arg.metadata["build_arg"]] = value
        return args


def profile_names(matrix: Matrix) -> list[str]:
    return [*matrix.mirrors, HOST_PROFILE]


def profile_help(root: Path) -> str:
    """`--mirror`'s help, its profiles read from matrix.yaml now (a matrix that does not load names none here:
    `invoke matrix` says why)."""
    try:
        names = ", ".join(load_matrix(root / MATRIX_FILE).mirrors)
    except InputError:
        names = "those of matrix.yaml's mirrors"
    return f"mirror profile: {names} (docs/offline.md) or {HOST_PROFILE} (this machine's apt mirror)"


def resolve(matrix: Matrix, profile: str, cell: Cell, sources: Iterable[Path] = APT_SOURCES) -> MirrorArgs:
    if profile == HOST_PROFILE:
        return _host(cell, sources)
    spec = matrix.mirrors.get(profile)
    if spec is None:
        raise InputError(
            [Problem("--mirror", f"unknown mirror profile {profile!r}", allowed_list(profile_names(matrix)))]
        )
    if profile == "none":
        return MirrorArgs(profile)
    notes: list[str] = []
    apt = apt_security = None
    if spec.apt is not None:
        if cell.os_family == "ubuntu":
            apt = spec.apt.ubuntu
        else:
            apt, apt_security = spec.apt.debian, spec.apt.debian_security
    torch_index = torch_find_links = None
    install = cell.install
    if install.variant_tag is not None:
        if spec.pytorch_wheels:
            # The mirror serves the CUDA build as a find-links page; the upstream index is then not asked.
            # spec validated it: `{variant}` is its only placeholder, so no str.format field can fail here.
            torch_find_links, torch_index = spec.pytorch_wheels.replace("{variant}", install.variant_tag), ""
        else:
            upstream = install.index_url or install.find_links
            notes.append(
                f"{profile} does not mirror PyTorch's {install.variant_tag} wheels; they come from upstream {upstream}"
            )
    if cell.cuda_source == "base":
        notes.append(f"{profile} does not mirror NVIDIA's CUDA apt repository; the base image keeps NVIDIA's source")
    return MirrorArgs(profile, apt, apt_security, spec.pypi, torch_index, torch_find_links, tuple(notes))


def _host(cell: Cell, sources: Iterable[Path]) -> MirrorArgs:
    if cell.os_family != "debian":
        note = f"the host's apt mirror serves Debian; {cell.os} keeps its upstream apt sources"
        return MirrorArgs(HOST_PROFILE, notes=(note,))
    main, security = debian_mirrors(sources, flag="--mirror host", instead="a profile from matrix.yaml")
    return MirrorArgs(HOST_PROFILE, apt=main, apt_security=security)


class NoDebianMirror(InputError):
    """This host's apt sources name no Debian mirror (an Ubuntu machine, e.g. GitHub's runners)."""


def debian_mirrors(
    sources: Iterable[Path] = APT_SOURCES, flag: str = "--mirror", instead: str = "--mirror URL"
) -> tuple[str, str]:
    """This host's Debian mirror and security mirror, from its apt sources (security defaults to main-security).

    Both reach a build (build arguments) or make-base.sh, so they pass the URL grammar first: InputError naming
    the file and line otherwise.
    """
    found = _host_sources(sources)
    main = next((s for s in found if s.uri.rstrip("/").endswith("/debian")), None)
    security = next((s for s in found if s.uri.rstrip("/").endswith("/debian-security")), None)
    if main is None:
        raise NoDebianMirror([Problem(flag, "no Debian mirror found in this host's apt sources", instead)])
    problems = [
        Problem(source.where, f"this host's Debian mirror (read for {flag}) {problem}", URL_ALLOWED)
        for source in (main, security)
        if source is not None and (problem := url_problem(source.uri)) is not None
    ]
    if problems:
        raise InputError(problems)
    return main.uri, security.uri if security else main.uri.rstrip("/") + "-security"


@dataclass(frozen=True)
class _AptSource:
    uri: str
    where: str  # file:line, for messages


def _host_sources(sources: Iterable[Path]) -> list[_AptSource]:
    files: list[Path] = []
    found: list[_AptSource] = []
    try:
        for source in sources:
            if source.is_dir():
                files += sorted(p for p in source.iterdir() if p.suffix in (".list", ".sources"))
            elif source.is_file():
                files.append(source)
        for path in files:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            for number, line in enumerate(lines, start=1):
                line = line.split("#", 1)[0].strip()
                if line.startswith("URIs:"):
                    uris = line.split()[1:]
                elif line.startswith("deb "):
                    uris = [w for w in line.split()[1:] if re.match(r"https?://", w)][:1]
                else:
                    continue
                found += [_AptSource(uri, f"{path}:{number}") for uri in uris if re.match(r"https?://", uri)]
    except OSError as error:
        raise InputError(
            [Problem(str(error.filename), f"cannot read this host's apt sources: {error.strerror}")]
        ) from None
    return found
