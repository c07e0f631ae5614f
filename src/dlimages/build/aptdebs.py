"""The locked `.deb` files (generate/aptlock.py) on this host: fetched from where the user says (`--apt-from`), each
checked against its SHA256 before anything uses it, gathered into a flat repository (Debian's dpkg-scanpackages)
that a build installs from without network. Also `invoke apt-repo`: the locked files copied into a folder that
serves as a mirror holding only them, for offline and air-gapped builds and for when the archive has moved on.

Where the files come from (`Origin`):
- `archive` (the default): the build's apt mirror (its mirror profile's, or this host's with `--mirror host`), else
  the distribution's own (aptlock.Distro.public). The archive keeps only current versions: once a locked one is
  superseded it disappears from there, and the build says so and names the two ways out below.
- a snapshot archive: a URL with `{archive}` and `{time}` in it, filled with each archive's name and the time the
  lock was resolved (Debian and Ubuntu both run one that answers such URLs).
- a folder made by `invoke apt-repo`, or the URL it is served at (any static web server).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from dlimages.build.mirrors import APT_SOURCES, NoDebianMirror, debian_mirrors
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.grammar import url_problem
from dlimages.core.runner import Runner
from dlimages.generate.aptlock import ARCH, DEBIAN12, AptLock, Deb, Distro

CACHE = Path(".work/apt/pool")  # verified files, by archive and pool path, kept between builds
REPOS = Path(".work/apt/repo")  # flat repositories, one per lock
ORIGIN_ALLOWED = (
    "archive, an http(s) URL (a snapshot archive's with {archive} and {time} in it) or a folder made by "
    "`invoke apt-repo`"
)
FETCH_THREADS = 4
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Origin:
    """Where the locked files come from: base URLs per archive, or a folder (`invoke apt-repo`'s layout)."""

    kind: str  # "archive", "snapshot", "repository"
    urls: Mapping[str, str] = field(default_factory=dict)  # archive name -> URL its pool is under
    folder: Path | None = None
    resolved: str = ""  # a snapshot's time

    def describe(self) -> str:
        if self.folder is not None:
            return f"the local repository {self.folder}"
        where = ", ".join(self.urls.values())
        what = {"archive": "the live archive", "snapshot": f"the snapshot archive at {self.resolved}"}
        return f"{what.get(self.kind, 'the repository')} ({where})"

    @property
    def key(self) -> str:
        """Names this origin's cache: files fetched from one origin are never taken for another's, so a build from a
        local repository really reads it (the proof that the archive is not needed)."""
        where = str(self.folder) if self.folder is not None else repr(sorted(self.urls.items()))
        return hashlib.sha256(where.encode()).hexdigest()[:12]

    def location(self, deb: Deb) -> str:
        if self.folder is not None:
            return str(self.folder / deb.archive / deb.path)
        return f"{self.urls[deb.archive].rstrip('/')}/{urllib.parse.quote(deb.path)}"


@dataclass(frozen=True)
class AptDebsSource:
    """A lock and where its files come from."""

    lock: AptLock
    origin: Origin


def origin(
    value: str | None, resolved: str, mirrors: Mapping[str, str | None] | None = None, distro: Distro = DEBIAN12
) -> Origin:
    """The origin `--apt-from` names (InputError otherwise). `mirrors`: the build's apt mirror per archive of
    `distro` (None: the distribution's own); `resolved`: the lock's time, for a snapshot archive's URL."""
    names = distro.archives
    if value is not None and not value.strip():
        raise InputError([Problem("--apt-from", "is empty", ORIGIN_ALLOWED)])
    if value in (None, "archive"):
        given = mirrors or {}
        return Origin("archive", {name: given.get(name) or distro.public[name] for name in names})
    assert value is not None
    if "://" in value:
        snapshot = "{archive}" in value
        urls = {
            name: value.replace("{archive}", name).replace("{time}", resolved)
            if snapshot
            else f"{value.rstrip('/')}/{name}"
            for name in names
        }
        problem = next((p for p in map(url_problem, urls.values()) if p is not None), None)
        if problem is not None:
            raise InputError([Problem("--apt-from", f"the URL {problem}", ORIGIN_ALLOWED)])
        return Origin("snapshot", urls, resolved=resolved) if snapshot else Origin("repository", urls)
    folder = Path(value).absolute()
    if not folder.is_dir():
        raise InputError(
            [Problem("--apt-from", f"{value[:200]!r} is not a folder, URL or known origin", ORIGIN_ALLOWED)]
        )
    if not (folder / "Release").is_file():
        said = f"{value[:200]!r} is a folder but no repository `invoke apt-repo` made (it has no Release file)"
        raise InputError([Problem("--apt-from", said, ORIGIN_ALLOWED)])
    return Origin("repository", folder=folder)


class FetchError(Exception):
    """Locked files that could not be had, or did not match the lock: one line per package."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_connections = threading.local()  # each fetching thread's open connections, by (scheme, host)


def _download(url: str, out: BinaryIO) -> None:
    """GET `url` into `out` over a connection this thread keeps open (one name lookup and TCP setup per host and
    thread, as apt does, not one per file: a lost DNS answer costs 5 s), trying once more on a dropped connection;
    through urllib, one connection a file, where a proxy is configured for it. HTTPError on a status other than
    200."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname or ""):
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 (http(s) only)
            shutil.copyfileobj(response, out, 1 << 20)
        return
    pool: dict[tuple[str, str], http.client.HTTPConnection] = _connections.__dict__.setdefault("pool", {})
    key = (parts.scheme, parts.netloc)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    for attempt in (1, 2):
        connection = pool.get(key)
        if connection is None:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            connection = pool[key] = kind(parts.netloc, timeout=TIMEOUT_S)
        try:
            connection.request("GET", path, headers={"User-Agent": "dlimages"})
            response = connection.getresponse()
        except (OSError, http.client.HTTPException):
            connection.close()
            del pool[key]
            if attempt == 2:
                raise
            continue
        if response.status != 200:
            response.read()
            raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, None)
        shutil.copyfileobj(response, out, 1 << 20)
        return


def _fetch_one(deb: Deb, source: Origin, cache: Path) -> str:
    """Put the checked file into the cache; "" or what went wrong, naming the package."""
    target = cache / deb.archive / deb.path
    if target.is_file() and _sha256(target) == deb.sha256:
        return ""
    where = source.location(deb)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, staged = tempfile.mkstemp(dir=target.parent, prefix=".fetch-")
    os.close(handle)
    part = Path(staged)
    try:
        try:
            if source.folder is not None:
                shutil.copyfile(where, part)
            else:
                with part.open("wb") as out:
                    _download(where, out)
        except urllib.error.HTTPError as error:
            gone = " (gone from there: build with `--apt-from` a snapshot archive's URL, or a repository apt-repo made)"
            return f"{deb.spec}: {where}: HTTP {error.code}{gone if error.code in (404, 410) else ''}"
        except (OSError, urllib.error.URLError) as error:
            return f"{deb.spec}: cannot read {where}: {getattr(error, 'reason', None) or error}"
        part.chmod(0o644)  # apt reads the files as its own user inside the build
        got = _sha256(part)
        if got != deb.sha256:
            return f"{deb.spec}: {where} has sha256 {got}, the lock says {deb.sha256}: refused"
        os.replace(part, target)
        return ""
    finally:
        part.unlink(missing_ok=True)


def fetch(debs: Sequence[Deb], source: Origin, root: Path) -> Path:
    """Every file of `debs` in the cache under `root`, checked; FetchError naming each package that failed."""
    cache = root / CACHE / source.key
    with concurrent.futures.ThreadPoolExecutor(FETCH_THREADS) as pool:
        failures = [problem for problem in pool.map(lambda d: _fetch_one(d, source, cache), debs) if problem]
    if failures:
        raise FetchError("\n".join(failures))
    return cache


def flat_repo(lock: AptLock, source: Origin, root: Path, runner: Runner) -> Path:
    """A folder holding exactly the lock's files and their index (`Packages`, by dpkg-scanpackages), as a build
    mounts it (`deb [trusted=yes] file:FOLDER ./`: every file was checked against the lock's hash here, and apt
    checks it against the index). Made once per lock; FetchError when a file cannot be had or does not match."""
    folder = root / repo_folder(lock, source)
    if (folder / "Packages").is_file():
        return folder
    cache = fetch(lock.debs, source, root)
    staging = Path(
        tempfile.mkdtemp(dir=folder.parent if folder.parent.is_dir() else _made(folder.parent), prefix=".staging-")
    )
    try:
        staging.chmod(0o755)
        for deb in lock.debs:
            os.link(cache / deb.archive / deb.path, staging / deb.filename)
        _index(staging, runner, lock.codename)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def repo_folder(lock: AptLock, source: Origin) -> Path:
    """Where flat_repo gathers `lock`'s files from `source`, relative to the repository root."""
    return REPOS / f"{lock.digest().removeprefix('sha256:')[:16]}-{source.key}"


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _index(folder: Path, runner: Runner, codename: str = DEBIAN12.codename) -> None:
    done = runner(["dpkg-scanpackages", "--multiversion", "."], cwd=folder, timeout=300)
    if not done.ok:
        raise FetchError(f"dpkg-scanpackages failed (Debian's dpkg-dev package provides it): {done.last_line}")
    write_atomic(folder / "Packages", done.out)
    # A Release file naming the suite: mmdebstrap takes the essential packages of the suite it is given only.
    index = done.out.encode()
    release = (
        f"Suite: {codename}\nCodename: {codename}\nDate: Sat, 01 Jan 2000 00:00:00 UTC\nArchitectures: {ARCH} all\n"
        "SHA256:\n"
        f" {hashlib.sha256(index).hexdigest()} {len(index)} Packages\n"
    )
    write_atomic(folder / "Release", release)


def export(sources: Iterable[AptDebsSource], folder: Path, root: Path, runner: Runner) -> int:
    """`invoke apt-repo`: the locks' files, each from its lock's origin, in `folder` as FOLDER/<archive>/<pool path>
    (a mirror holding only them, usable as `--apt-from FOLDER` or served as `--apt-from URL`), with a flat index at
    the top for apt (`deb [trusted=yes] file:FOLDER ./`). Returns how many files it holds."""
    copied: set[Deb] = set()
    for source in sources:
        cache = fetch(source.lock.debs, source.origin, root)
        for deb in source.lock.debs:
            target = folder / deb.archive / deb.path
            if target.is_symlink() or not target.parent.resolve().is_relative_to(folder.resolve()):
                raise FetchError(f"{target} is, or is under, a symlink out of {folder}: nothing is written through one")
            if not (target.is_file() and _sha256(target) == deb.sha256):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cache / deb.archive / deb.path, target)
            copied.add(deb)
    _index(folder, runner)
    return len(copied)


def host_mirrors(sources: Iterable[Path] = APT_SOURCES) -> dict[str, str | None]:
    """This host's Debian mirror and security mirror (its apt sources, read now), as origin() takes them; none where
    the host names none (GitHub's Ubuntu runners: the public archive then). Where the files come from never enters
    the image: each is checked against its lock's hash."""
    try:
        return mirrors_of(*debian_mirrors(sources))
    except NoDebianMirror:
        return {}


def mirrors_of(apt: str | None, apt_security: str | None, distro: Distro = DEBIAN12) -> dict[str, str | None]:
    """A build's mirror arguments as origin() takes them."""
    return {"debian": apt, "debian-security": apt_security} if distro.os == "debian12" else {"ubuntu": apt}
