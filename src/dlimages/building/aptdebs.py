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
import contextlib
import errno
import hashlib
import http.client
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from dlimages.artifacts.oslock import ARCH, AptLock, Deb, Distro
from dlimages.building.mirrors import APT_SOURCES, NoDebianMirror, debian_mirrors
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.grammar import url_problem
from dlimages.core.runner import Runner

CACHE = Path(".work/apt/pool")  # verified files, by archive and pool path, kept between builds
REPOS = Path(".work/apt/repo")  # flat repositories, one per lock
ORIGIN_ALLOWED = (
    "archive, an http(s) URL (a snapshot archive's with {archive} and {time} in it) or a folder made by "
    "`invoke apt-repo`"
)
FETCH_THREADS = 4
TIMEOUT_S = 30.0  # one read: a server silent this long has stalled
GRACE_S = 60.0  # one file's deadline: this, plus its size at MIN_RATE
MIN_RATE = 64_000  # bytes a second
RETRY_S = (1.0, 2.0)  # the pauses before the second and third tries after a transient failure
PROGRESS_S = 30.0  # how often fetch says where it stands


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
    """A lock and where its files come from: the OS packages a build installs, or `invoke apt-repo` copies."""

    lock: AptLock
    origin: Origin

    @property
    def folder(self) -> Path:
        """The flat repository (relative to the repository root) flat_repo gathers the files in."""
        return repo_folder(self.lock, self.origin)


def origin(value: str | None, resolved: str, mirrors: Mapping[str, str | None] | None, distro: Distro) -> Origin:
    """The origin `--apt-from` names (InputError otherwise). `mirrors`: the build's apt mirror per archive of
    `distro` (None: the distribution's own); `resolved`: the lock's time, for a snapshot archive's URL."""
    names = distro.archives
    if value is not None and not value.strip():
        raise InputError([Problem("--apt-from", "is empty", ORIGIN_ALLOWED)])
    if value is None or value == "archive":
        given = mirrors or {}
        return Origin("archive", {name: given.get(name) or distro.public[name] for name in names})
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


def _sha256(file: Path | BinaryIO) -> str:
    if isinstance(file, Path):
        with file.open("rb") as handle:
            return _sha256(handle)
    digest = hashlib.sha256()
    for chunk in iter(lambda: file.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()


class _Stop(threading.Event):
    """Set on Ctrl-C: the workers stop before their next read or try, and the sockets they read are shut down, so a
    read blocked on a silent server ends at once rather than after TIMEOUT_S."""

    def __init__(self) -> None:
        super().__init__()
        self.sockets: list[socket.socket] = []

    def watch(self, sock: socket.socket | None) -> None:
        self.sockets += [sock] if sock is not None else []  # added, then checked: stop() sets, then shuts down
        if self.is_set():
            self.stop()

    def stop(self) -> None:
        self.set()
        for sock in list(self.sockets):
            with contextlib.suppress(OSError):  # closed already
                sock.shutdown(socket.SHUT_RDWR)


_connections = threading.local()  # each fetching thread's open connections, by (scheme, host)


def _download(url: str, out: BinaryIO, size: int, stop: _Stop) -> None:
    """GET `url` into `out` over a connection this thread keeps open (one name lookup and TCP setup per host and
    thread, as apt does, not one per file: a lost DNS answer costs 5 s), once more at once if a kept one was dropped;
    through urllib, one connection a file, where a proxy is configured for it. HTTPError on a status but 200."""
    start = time.monotonic()
    parts = urllib.parse.urlsplit(url)
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname or ""):
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 (http(s) only)
            stop.watch(getattr(getattr(response.fp, "raw", None), "_sock", None))  # urllib keeps no other handle
            _receive(response, out, url, size, start, stop)
        return
    pool: dict[tuple[str, str], http.client.HTTPConnection] = _connections.__dict__.setdefault("pool", {})
    key = (parts.scheme, parts.netloc)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    while True:
        connection, response = pool.get(key), None
        reused = connection is not None
        if connection is None:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            connection = pool[key] = kind(parts.netloc, timeout=TIMEOUT_S)
        try:
            connection.request("GET", path, headers={"User-Agent": "dlimages"})
            stop.watch(connection.sock)
            response = connection.getresponse()
            if response.status != 200:
                raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, None)
            _receive(response, out, url, size, start, stop)
            return
        except BaseException:
            connection.close()  # dropped, or in the middle of a response: of no use for the next file
            del pool[key]
            if response is not None or not reused:
                raise


def _receive(response: http.client.HTTPResponse, out: BinaryIO, url: str, size: int, start: float, stop: _Stop) -> None:
    """Copy the body as it comes (read1: what has arrived), checking Ctrl-C and the deadline between chunks: GRACE_S
    plus the size (the lock's, else Content-Length) at MIN_RATE. A byte every 20 s never trips TIMEOUT_S."""
    expected = size or response.length or 0
    limit = GRACE_S + expected / MIN_RATE
    received = 0
    while chunk := response.read1(1 << 20):
        out.write(chunk)
        received += len(chunk)
        if stop.is_set():
            raise FetchError("stopped (interrupted)")
        if (spent := time.monotonic() - start) > limit:
            host, name = urllib.parse.urlsplit(url).hostname, urllib.parse.unquote(url.rsplit("/", 1)[-1])
            raise FetchError(
                f"stopped: {host} sent {received / 1e3:.0f} kB of {name} in {spent:.0f} s (the limit for "
                f"{expected / 1e6:.1f} MB is {limit:.0f} s)"
            )
    if response.length:  # the connection ended before Content-Length did
        raise http.client.IncompleteRead(b"", response.length)
    response.close()  # read to its end: the connection serves the next file


def _unnamed(folder: Path) -> tuple[int, Path | None]:
    """A file in `folder` to download into: with no name (O_TMPFILE), so that a fetch killed midway leaves nothing;
    a `.fetch-*` one, and its path, where the file system has none (EOPNOTSUPP; EISDIR, EINVAL: no such flag)."""
    try:
        return os.open(folder, getattr(os, "O_TMPFILE", 0) | os.O_RDWR, 0o644), None
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
    handle, staged = tempfile.mkstemp(dir=folder, prefix=".fetch-")
    return handle, Path(staged)


def _link(handle: int, target: Path) -> None:
    """Give the unnamed file `handle` the name `target`, replacing what is there in one step (linkat replaces
    nothing: link to a new name, then rename)."""
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        name = f".fetch-{os.urandom(8).hex()}" if os.path.lexists(target) else target.name
        os.link(f"/proc/self/fd/{handle}", name, dst_dir_fd=folder, follow_symlinks=True)
        os.replace(name, target.name, src_dir_fd=folder, dst_dir_fd=folder)  # a no-op if linked as target
    finally:
        os.close(folder)


def _save(deb: Deb, where: str, target: Path, local: bool, stop: _Stop) -> str:
    """`where` as `target` once its SHA256 matches the lock's; "" or the mismatch. OSError (and the like) when it
    cannot be read."""
    handle, staged = _unnamed(target.parent)
    try:
        with os.fdopen(handle, "w+b") as out:
            if local:
                with open(where, "rb") as copied:
                    shutil.copyfileobj(copied, out, 1 << 20)
            else:
                _download(where, out, deb.size, stop)
            out.seek(0)  # written out first
            got = _sha256(out)
            if got != deb.sha256:
                return f"{deb.spec}: {where} has sha256 {got}, the lock says {deb.sha256}: refused"
            os.fchmod(out.fileno(), 0o644)  # apt reads the files as its own user inside the build
            if staged is None:
                _link(out.fileno(), target)
            else:
                os.replace(staged, target)
            return ""
    finally:
        if staged is not None:
            staged.unlink(missing_ok=True)


def _fetch_one(deb: Deb, source: Origin, cache: Path, stop: _Stop) -> str:
    """Put the checked file into the cache; "" or what went wrong, naming the package. A transient failure (no DNS
    answer, a connection refused, dropped or silent for TIMEOUT_S) is tried again after each pause of RETRY_S; an
    HTTP error, a file that does not match and one past its deadline are not."""
    target = cache / deb.archive / deb.path
    if stop.is_set() or (target.is_file() and _sha256(target) == deb.sha256):
        return ""
    where = source.location(deb)
    target.parent.mkdir(parents=True, exist_ok=True)
    pauses = list(RETRY_S) if source.folder is None else []
    while True:
        try:
            return _save(deb, where, target, source.folder is not None, stop)
        except urllib.error.HTTPError as error:
            gone = " (gone from there: build with `--apt-from` a snapshot archive's URL, or a repository apt-repo made)"
            return f"{deb.spec}: {where}: HTTP {error.code}{gone if error.code in (404, 410) else ''}"
        except FetchError as error:  # past its deadline, or Ctrl-C
            return f"{deb.spec}: {error}"
        except (OSError, http.client.HTTPException) as error:
            if not pauses or stop.wait(pauses.pop(0)):
                return f"{deb.spec}: cannot read {where}: {getattr(error, 'reason', None) or error}"


def fetch(debs: Sequence[Deb], source: Origin, root: Path, say: Callable[[str], object] | None = None) -> Path:
    """Every file of `debs` in the cache under `root`, checked; FetchError naming each package that failed. Says
    where it stands every PROGRESS_S; on Ctrl-C, stops the downloads under way at once."""
    cache = root / CACHE / source.key
    say = say or (lambda line: print(line, flush=True))
    stop = _Stop()
    with concurrent.futures.ThreadPoolExecutor(FETCH_THREADS) as pool:
        try:
            futures = [pool.submit(_fetch_one, deb, source, cache, stop) for deb in debs]
            pending = set(futures)
            while pending:
                pending = concurrent.futures.wait(pending, timeout=PROGRESS_S).not_done
                if pending:
                    ready = [deb for deb, future in zip(debs, futures, strict=True) if future.done()]
                    megabytes = sum(deb.size for deb in ready) / 1e6
                    say(f"the locked .deb files: {len(ready)} of {len(debs)} ready ({megabytes:.1f} MB)")
        except BaseException:
            stop.stop()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    failures = [problem for problem in (future.result() for future in futures) if problem]
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
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".staging-"))
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


def _index(folder: Path, runner: Runner, codename: str | None) -> None:
    done = runner(["dpkg-scanpackages", "--multiversion", "."], cwd=folder, timeout=300)
    if not done.ok:
        raise FetchError(f"dpkg-scanpackages failed (Debian's dpkg-dev package provides it): {done.last_line}")
    write_atomic(folder / "Packages", done.out)
    # A Release file naming the suite (where the files are of one): mmdebstrap takes the essential packages of the
    # suite it is given only.
    index = done.out.encode()
    suite = f"Suite: {codename}\nCodename: {codename}\n" if codename else ""
    release = (
        f"{suite}Date: Sat, 01 Jan 2000 00:00:00 UTC\nArchitectures: {ARCH} all\n"
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
    _index(folder, runner, None)  # the files of every lock, of several suites
    return len(copied)


def host_mirrors(sources: Iterable[Path] = APT_SOURCES) -> dict[str, str | None]:
    """This host's Debian mirror and security mirror (its apt sources, read now), as origin() takes them; none where
    the host names none (GitHub's Ubuntu runners: the public archive then). Where the files come from never enters
    the image: each is checked against its lock's hash."""
    try:
        apt, security = debian_mirrors(sources)
    except NoDebianMirror:
        return {}
    return {"debian": apt, "debian-security": security}


def mirrors_of(apt: str | None, apt_security: str | None, distro: Distro) -> dict[str, str | None]:
    """A build's mirror arguments as origin() takes them."""
    return {"debian": apt, "debian-security": apt_security} if distro.family == "debian" else {"ubuntu": apt}
