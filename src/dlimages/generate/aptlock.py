"""Resolving the OS package locks (their format and staleness: dlimages.artifacts.oslock) by apt from the archive's
signed index (InRelease -> Packages).

Resolving runs this host's apt-get with a configuration of its own (its own sources, lists, cache and an empty
dpkg status), never the host's: apt checks each suite's InRelease against Debian's keyring, then each Packages
index against it. The base is what `mmdebstrap --variant=minbase` installs (every Essential or Priority: required
package, and apt); a cell adds the package set of matrix.yaml (`packages.apt`) on top of it, resolved together
with the base so that the base's packages are never replaced.
"""

from __future__ import annotations

import re
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlimages.artifacts.oslock import (
    APT_LOCK,
    ARCH,
    AptLock,
    Deb,
    Distro,
    base_input,
    base_lock_path,
    cell_input,
    moved,
    read,
    stale,
    write,
)
from dlimages.core.runner import Runner

RESOLVE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Resolved:
    base: AptLock
    cell: AptLock  # the packages the cells add on top of the base


class ResolveError(Exception):
    """apt could not resolve (the message says why, in apt's words)."""


def _config(scratch: Path, urls: Mapping[str, str], distro: Distro, status: str) -> Path:
    for folder in ("lists/partial", "cache/archives/partial", "sources"):
        (scratch / folder).mkdir(parents=True, exist_ok=True)
    (scratch / "status").write_text(status, encoding="utf-8")
    components = " ".join(distro.components)
    sources = "".join(
        f"Types: deb\nURIs: {urls[name]}\nSuites: {' '.join(suites)}\nComponents: {components}\n"
        f"Signed-By: {distro.keyring}\n\n"
        for name, suites in distro.archives.items()
    )
    (scratch / "sources/archive.sources").write_text(sources)
    config = scratch / "apt.conf"
    settings = {
        "Dir::Etc::SourceList": "/dev/null",
        "Dir::Etc::SourceParts": scratch / "sources",
        "Dir::Etc::Parts": "/dev/null",
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": "/dev/null",
        "Dir::State": scratch,
        "Dir::State::Lists": scratch / "lists",
        "Dir::State::status": scratch / "status",
        "Dir::Cache": scratch / "cache",
        "APT::Architecture": ARCH,
        "APT::Install-Recommends": "false",
        "Acquire::Languages": "none",
        "Acquire::ForceHash": "SHA256",
        "Debug::NoLocking": "true",
        "APT::Sandbox::User": "root",  # the scratch folder is not _apt's to write (this does not skip any check)
    }
    config.write_text(
        "".join(f'{key} "{value}";\n' for key, value in settings.items()) + f'APT::Architectures {{ "{ARCH}"; }};\n'
    )
    return config


def minbase(lists: Path, codename: str) -> list[str]:
    """What `mmdebstrap --variant=minbase` installs, before dependencies: every Essential or Priority: required
    package of the main suite `codename`, apt, and usr-is-merged, which make-base.sh's merged-usr hook installs
    (without it apt takes usrmerge and full perl)."""
    names = {"apt", "usr-is-merged"}
    for index in lists.glob(f"*_dists_{codename}_main_binary-{ARCH}_Packages"):
        for stanza in index.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
            if fields.get("Priority") == "required" or fields.get("Essential") == "yes":
                names.add(fields["Package"])
    return sorted(names)


def _env(config: Path) -> dict[str, str]:
    return {"APT_CONFIG": str(config), "LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def _debs(config: Path, names: Sequence[str], urls: Mapping[str, str], runner: Runner) -> list[Deb]:
    env = _env(config)
    simulated = runner(["apt-get", "install", "-s", "-qq", *names], env=env, timeout=RESOLVE_TIMEOUT_S)
    uris = runner(["apt-get", "install", "--print-uris", "-qq", *names], env=env, timeout=RESOLVE_TIMEOUT_S)
    for done in (simulated, uris):
        if not done.ok:
            raise ResolveError(f"apt-get could not resolve {', '.join(names)}: {done.err.strip() or done.last_line}")
    # `Inst NAME (VERSION ...)`, or `Inst NAME [INSTALLED] (VERSION ...)` for an upgrade of a base's package
    versions = dict(re.findall(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ", simulated.out, re.MULTILINE))
    debs: list[Deb] = []
    for url, filename, size, sha in re.findall(
        r"^'(\S+)' (\S+) ([0-9]+) SHA256:([0-9a-f]{64})$", uris.out, re.MULTILINE
    ):
        name = filename.split("_", 1)[0]
        archive = next((a for a, base in urls.items() if url.startswith(base.rstrip("/") + "/")), None)
        if archive is None:
            raise ResolveError(f"apt named {url}, which is in none of the archives {', '.join(urls.values())}")
        if name not in versions:
            raise ResolveError(f"apt named {url}, but no version of {name} among what it would install")
        path = urllib.parse.unquote(url[len(urls[archive].rstrip("/")) + 1 :])
        debs.append(Deb(name, versions[name], archive, path, int(size), sha))
    if len(debs) != len(versions):
        raise ResolveError(f"apt would install {len(versions)} packages but named {len(debs)} files")
    return sorted(debs)


def _updated(scratch: Path, urls: Mapping[str, str], distro: Distro, status: str, runner: Runner) -> Path:
    """apt's private configuration in `scratch`, its lists read from the archives (ResolveError when apt cannot
    check them against the keyring, or reach them)."""
    config = _config(scratch, urls, distro, status)
    update = runner(["apt-get", "update", "-qq"], env=_env(config), timeout=RESOLVE_TIMEOUT_S)
    if not update.ok or "W: " in update.err or "E: " in update.err:
        raise ResolveError(f"apt-get update could not read the signed indexes: {(update.err or update.out).strip()}")
    return config


def resolve_on(
    distro: Distro, packages: Sequence[str], base: str, status: str, urls: Mapping[str, str], runner: Runner
) -> AptLock:
    """A cell's lock on a pulled `base` (name:tag@digest) whose installed packages are `status` (its
    /var/lib/dpkg/status): what apt installs or upgrades for `packages` there, from `distro`'s archives at `urls`."""
    resolved = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="dlimages-aptlock-") as folder:
        config = _updated(Path(folder), urls, distro, status, runner)
        debs = _debs(config, packages, urls, runner)
    part = f"what the apt step installs on {base}: {' '.join(sorted(packages))} and what they need"
    return AptLock(part, tuple(debs), cell_input(packages, base, distro.os), resolved, distro.header, base)


def resolve(distro: Distro, packages: Sequence[str], urls: Mapping[str, str], runner: Runner) -> Resolved:
    """The lock of the offline base of `distro` and the cells' lock on it, resolved together from the archives at
    `urls` (archive name -> URL)."""
    resolved = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="dlimages-aptlock-") as folder:
        scratch = Path(folder)
        config = _updated(scratch, urls, distro, "", runner)
        names = minbase(scratch / "lists", distro.codename)
        base_debs = _debs(config, names, urls, runner)
        every = _debs(config, [*names, *packages], urls, runner)
    part = f"the offline {distro.os} base (mmdebstrap --variant=minbase)"
    base = AptLock(part, tuple(base_debs), base_input(distro), resolved, distro.header)
    kept = set(base_debs)
    moved = [deb.spec for deb in every if deb not in kept and deb.name in {b.name for b in base_debs}]
    if moved:
        raise ResolveError(f"the package set would replace packages of the base: {', '.join(moved)}")
    added = tuple(deb for deb in every if deb not in kept)
    part = f"what the apt step installs on the base: {' '.join(sorted(packages))} and what they need"
    cell = AptLock(part, added, cell_input(packages, base.digest(), distro.os), resolved, distro.header, base.digest())
    return Resolved(base, cell)


def lock_os(
    root: Path,
    distro: Distro,
    cells: Sequence[Path],
    packages: Sequence[str],
    urls: Mapping[str, str],
    runner: Runner,
    *,
    upgrade: bool,
) -> list[str]:
    """Resolve and write the lock of the offline base of `distro` and the apt lock of each cell folder in `cells`
    (the cells on that base) when one is missing or stale, or, with `upgrade`, to take the archive's newest
    packages; a lock whose packages did not move keeps its text (and time). Returns what it did, one line each: what
    moved, package by package. ResolveError from apt."""
    path = base_lock_path(distro.os)
    base_path = root / path
    checked = [stale(root, base_path, None, distro), *(stale(root, c / APT_LOCK, packages, distro) for c in cells)]
    if not upgrade and not any(checked):
        return [f"OS package locks: up to date ({path} and {len(cells)} cells)"]
    fresh = resolve(distro, packages, urls, runner)
    before = read(base_path)
    base = (
        before
        if before is not None and (before.debs, before.input) == (fresh.base.debs, fresh.base.input)
        else fresh.base
    )
    lines = [f"{path}: {'unchanged' if base is before else 'written'}", *(f"  {m}" for m in moved(before, base))]
    write(base_path, base)
    # The time of this resolution: a snapshot archive is asked for the cell's packages at it.
    want = replace(fresh.cell, input=cell_input(packages, base.digest(), distro.os), base=base.digest())
    shown = False
    for folder in cells:
        old = read(folder / APT_LOCK)
        if old is not None and (old.debs, old.input, old.base) == (want.debs, want.input, want.base):
            continue
        write(folder / APT_LOCK, want)
        if not shown:
            lines += [f"cells' apt.lock ({len(cells)} cells):", *(f"  {m}" for m in moved(old, want))]
            shown = True
    return lines
