"""The locked `.deb` files on this host (aptdebs.py): where `--apt-from` takes them from, fetching them over HTTP
from a server on 127.0.0.1 with every hash checked, and the flat repositories and `invoke apt-repo` folders made of
them, indexed by Debian's own dpkg-scanpackages over small real packages (dpkg-deb builds them here).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import hashlib
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts import oslock
from dlimages.artifacts.oslock import AptLock, Deb
from dlimages.building import aptdebs
from dlimages.building.aptdebs import FetchError, Origin
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner

T0 = "20261201T194500Z"
ALLOWED = aptdebs.ORIGIN_ALLOWED
GONE = " (gone from there: build with `--apt-from` a snapshot archive's URL, or a repository apt-repo made)"
DEBIAN12 = oslock.Distro.of("debian12", "debian", "bookworm")
PUBLIC = DEBIAN12.public


def origin(value: str | None, resolved: str, mirrors: dict[str, str | None] | None = None) -> Origin:
    """Where `--apt-from` `value` takes the files of a Debian 12 lock from."""
    return aptdebs.origin(value, resolved, mirrors, DEBIAN12)


def locked(name: str, version: str, data: bytes, archive: str = "debian") -> Deb:
    """The lock's entry for a file holding `data`, laid out as Debian's pool lays it out."""
    path = f"pool/main/{name[0]}/{name}/{name}_{version}_all.deb"
    return Deb(name, version, archive, path, len(data), hashlib.sha256(data).hexdigest())


def lock_of(*debs: Deb) -> AptLock:
    return AptLock("a test", tuple(sorted(debs)), "sha256:" + "1" * 64, T0, DEBIAN12.header)


def put(folder: Path, deb: Deb, data: bytes) -> Path:
    """`data` where a mirror (or `invoke apt-repo`'s folder) at `folder` serves `deb`."""
    target = folder / deb.archive / deb.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def no_command(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    raise AssertionError(f"ran {argv}")


# --- where the files come from ----------------------------------------------------------------------------------


def test_the_archive_is_the_builds_mirror_per_archive_else_debians_own() -> None:
    mirrors = aptdebs.mirrors_of("http://127.0.0.1:3142/debian", None, DEBIAN12)
    given = origin(None, T0, mirrors)
    assert given.kind == "archive" and given.folder is None
    assert dict(given.urls) == {
        "debian": "http://127.0.0.1:3142/debian",
        "debian-security": PUBLIC["debian-security"],
    }
    for value in (None, "archive"):
        assert dict(origin(value, T0).urls) == PUBLIC
    for empty in ("", " "):  # before: taken for the archive
        with pytest.raises(InputError, match="--apt-from: is empty"):
            origin(empty, T0)
    assert given.describe() == f"the live archive (http://127.0.0.1:3142/debian, {PUBLIC['debian-security']})"


def test_a_snapshot_archives_url_is_filled_with_each_archive_and_the_locks_time() -> None:
    url = "https://snapshot.example.org/archive/{archive}/{time}/"
    snapshot = origin(url, T0, aptdebs.mirrors_of("http://127.0.0.1:3142/debian", None, DEBIAN12))
    assert snapshot.kind == "snapshot"
    assert dict(snapshot.urls) == {
        "debian": f"https://snapshot.example.org/archive/debian/{T0}/",
        "debian-security": f"https://snapshot.example.org/archive/debian-security/{T0}/",
    }
    assert snapshot.describe() == (
        f"the snapshot archive at {T0} (https://snapshot.example.org/archive/debian/{T0}/, "
        f"https://snapshot.example.org/archive/debian-security/{T0}/)"
    )


def test_a_url_is_a_repository_holding_each_archive_under_it() -> None:
    served = origin("http://example.org/apt/", T0)
    assert served == Origin(
        "repository",
        {"debian": "http://example.org/apt/debian", "debian-security": "http://example.org/apt/debian-security"},
    )
    deb = locked("libfoo", "1.0+dfsg-1~deb12u1", b"x", "debian-security")
    assert served.location(deb) == (
        "http://example.org/apt/debian-security/pool/main/l/libfoo/libfoo_1.0%2Bdfsg-1~deb12u1_all.deb"
    )


def test_a_folder_is_a_local_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo/Release").write_text("Suite: bookworm\n")  # as `invoke apt-repo` leaves it
    monkeypatch.chdir(tmp_path)
    local = origin("repo", T0)
    assert local == Origin("repository", folder=tmp_path / "repo")
    (tmp_path / "other").mkdir()  # before: any folder was taken, and every build from it failed file by file
    with pytest.raises(InputError, match="'other' is a folder but no repository `invoke apt-repo` made"):
        origin("other", T0)
    deb = locked("foo", "1.0+1", b"x")
    assert local.location(deb) == str(tmp_path / "repo/debian/pool/main/f/foo/foo_1.0+1_all.deb")
    assert local.describe() == f"the local repository {tmp_path / 'repo'}"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("http://x/;id", "the URL has ';' in its path"),
        ("ftp://example.org/apt", "the URL is not an http:// or https:// URL"),
        ("http://user:hunter2@example.org/apt", "the URL carries credentials (user:password@)"),
        ("no/such/folder", "'no/such/folder' is not a folder, URL or known origin"),
        ("snapshots", "'snapshots' is not a folder, URL or known origin"),
    ],
    ids=["shell-character", "ftp", "credentials", "missing-folder", "misspelt"],
)
def test_anything_else_is_an_input_error_naming_the_flag_and_what_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as caught:
        origin(value, T0)
    (problem,) = caught.value.problems
    assert problem.where == "--apt-from" and problem.allowed == ALLOWED
    assert problem.message.startswith(message), problem.message
    assert "hunter2" not in str(problem), "a URL's credentials are never quoted back"


# --- fetching over HTTP -----------------------------------------------------------------------------------------


@dataclass
class Server:
    """A static web server on 127.0.0.1 serving `folder`, and the paths it was asked for."""

    url: str
    folder: Path
    asked: list[str]


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy between the fetches and 127.0.0.1, in this process and the ones it starts."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # read at each request, whatever opener urllib made before


@pytest.fixture
def server(tmp_path: Path, direct: None) -> Iterator[Server]:
    folder = tmp_path / "served"
    folder.mkdir()
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def do_GET(self) -> None:
            asked.append(self.path)
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows what fails
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)  # quick to shut down
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}/mirror", folder / "mirror", asked)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


GOOD = {"libc6": b"libc6 file\n", "curl": b"curl file\n"}
LIBC6 = locked("libc6", "2.36-9+deb12u9", GOOD["libc6"], "debian-security")
CURL = locked("curl", "7.88.1-10+deb12u8", GOOD["curl"])


def leftovers(folder: Path) -> list[Path]:
    return [path for path in folder.rglob(".fetch-*")] if folder.is_dir() else []


def test_fetched_files_land_checked_in_the_cache(tmp_path: Path, server: Server) -> None:
    put(server.folder, LIBC6, GOOD["libc6"])
    put(server.folder, CURL, GOOD["curl"])
    source = origin(server.url, T0)
    cache = aptdebs.fetch([LIBC6, CURL], source, tmp_path / "root")
    assert cache == tmp_path / "root" / aptdebs.CACHE / source.key
    for deb in (LIBC6, CURL):
        target = cache / deb.archive / deb.path
        assert target.read_bytes() == GOOD[deb.name]
        assert target.stat().st_mode & 0o777 == 0o644, "apt reads them as its own user in the build"
    assert sorted(server.asked) == [
        "/mirror/debian-security/pool/main/l/libc6/libc6_2.36-9%2Bdeb12u9_all.deb",
        "/mirror/debian/pool/main/c/curl/curl_7.88.1-10%2Bdeb12u8_all.deb",
    ]
    assert leftovers(cache) == []


def test_a_cached_file_is_not_fetched_again_unless_it_no_longer_matches(tmp_path: Path, server: Server) -> None:
    put(server.folder, LIBC6, GOOD["libc6"])
    put(server.folder, CURL, GOOD["curl"])
    source = origin(server.url, T0)
    cache = aptdebs.fetch([LIBC6, CURL], source, tmp_path)
    assert len(server.asked) == 2
    aptdebs.fetch([LIBC6, CURL], source, tmp_path)
    assert len(server.asked) == 2, "the server is not asked for a file the cache holds"
    (cache / CURL.archive / CURL.path).write_bytes(b"damaged")
    aptdebs.fetch([LIBC6, CURL], source, tmp_path)
    assert server.asked[2:] == ["/mirror/debian/pool/main/c/curl/curl_7.88.1-10%2Bdeb12u8_all.deb"]
    assert (cache / CURL.archive / CURL.path).read_bytes() == GOOD["curl"]
    assert leftovers(cache) == [], "the damaged file is replaced in one step"


def test_files_fetched_from_one_origin_are_not_taken_for_anothers(tmp_path: Path, server: Server) -> None:
    """A build from a local repository reads it: what the cache holds from the archive proves nothing about it."""
    put(server.folder, CURL, GOOD["curl"])
    aptdebs.fetch([CURL], origin(server.url, T0), tmp_path)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo/Release").write_text("Suite: bookworm\n")  # as `invoke apt-repo` leaves it
    with pytest.raises(FetchError, match=r"^curl=7\.88\.1-10\+deb12u8: cannot read .*/repo/debian/pool/main/c/curl/"):
        aptdebs.fetch([CURL], origin(str(tmp_path / "repo"), T0), tmp_path)
    put(tmp_path / "repo", CURL, GOOD["curl"])
    assert aptdebs.fetch([CURL], origin(str(tmp_path / "repo"), T0), tmp_path) != aptdebs.fetch(
        [CURL], origin(server.url, T0), tmp_path
    )
    assert len(server.asked) == 1


def test_a_file_that_does_not_match_the_lock_is_refused(tmp_path: Path, server: Server) -> None:
    put(server.folder, LIBC6, GOOD["libc6"])
    put(server.folder, CURL, b"something else\n")
    source = origin(server.url, T0)
    with pytest.raises(FetchError) as caught:
        aptdebs.fetch([LIBC6, CURL], source, tmp_path)
    got = hashlib.sha256(b"something else\n").hexdigest()
    assert str(caught.value) == (
        f"curl=7.88.1-10+deb12u8: {source.location(CURL)} has sha256 {got}, the lock says {CURL.sha256}: refused"
    )
    cache = tmp_path / aptdebs.CACHE / source.key
    assert not (cache / CURL.archive / CURL.path).exists()
    assert (cache / LIBC6.archive / LIBC6.path).read_bytes() == GOOD["libc6"], "the good one is kept"
    assert leftovers(cache) == []
    assert len(server.asked) == 2, "a file that does not match is not asked for again"


def test_a_file_the_server_does_not_have_names_the_package_and_the_ways_out(tmp_path: Path, server: Server) -> None:
    server.folder.mkdir()
    source = origin(server.url, T0)
    with pytest.raises(FetchError) as caught:
        aptdebs.fetch([CURL, LIBC6], source, tmp_path)
    assert str(caught.value).splitlines() == [
        f"curl=7.88.1-10+deb12u8: {source.location(CURL)}: HTTP 404{GONE}",
        f"libc6=2.36-9+deb12u9: {source.location(LIBC6)}: HTTP 404{GONE}",
    ]
    assert leftovers(tmp_path / aptdebs.CACHE / source.key) == []
    assert len(server.asked) == 2, "an HTTP error is not tried again"


def test_a_file_a_local_repository_lacks_is_a_fetch_error(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo/Release").write_text("Suite: bookworm\n")  # as `invoke apt-repo` leaves it
    with pytest.raises(FetchError, match=r"^curl=7\.88\.1-10\+deb12u8: cannot read .*/repo/debian/pool/main/c/curl/"):
        aptdebs.fetch([CURL], origin(str(tmp_path / "repo"), T0), tmp_path / "root")


# --- slow, stalled, dropped and interrupted downloads -------------------------------------------------------------

Reply = Callable[[http.server.BaseHTTPRequestHandler], None]
SLOW = locked("slow", "1.0", b"x" * 100)  # served a byte every 0.5 s
BIG = locked("big", "1.0", b"b" * 1_500_000)  # served at once


@contextlib.contextmanager
def answering(reply: Reply) -> Iterator[str]:
    """A server on 127.0.0.1 that answers each GET with `reply` (a thread each); the URL of its mirror."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with contextlib.suppress(OSError):  # the fetch went away: stopped, or killed
                reply(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mirror"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def send(handler: http.server.BaseHTTPRequestHandler, data: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def trickle(started: threading.Event, seconds: float = 5.0) -> Reply:
    """Promises 100 bytes and sends one every 0.5 s for `seconds`; `started` once one is sent. BIG comes at once."""

    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        if "/big/" in handler.path:
            return send(handler, b"b" * BIG.size)
        handler.send_response(200)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        for _ in range(int(seconds / 0.5)):
            handler.wfile.write(b"x")
            started.set()
            time.sleep(0.5)

    return reply


def files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if not path.is_dir())


def test_a_trickling_server_is_stopped_at_the_files_deadline_naming_the_host(
    tmp_path: Path, direct: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: no deadline, and a 120 s timeout that a byte every 20 s never trips (7 minutes on one file)."""
    monkeypatch.setattr(aptdebs, "GRACE_S", 1.0)  # the deadline: 1 s plus 100 bytes at 64 kB/s
    monkeypatch.setattr(aptdebs, "PROGRESS_S", 0.4)
    said: list[str] = []
    with answering(trickle(threading.Event())) as url:
        start = time.monotonic()
        with pytest.raises(FetchError) as caught:
            aptdebs.fetch([BIG, SLOW], origin(url, T0), tmp_path, say=said.append)
        took = time.monotonic() - start
    assert took < 3, f"stopped after {took:.1f} s"
    assert caught.match(
        r"^slow=1\.0: stopped: 127\.0\.0\.1 sent 0 kB of slow_1\.0_all\.deb in [12] s \(the limit for 0\.0 MB is 1 s\)$"
    )
    assert said and set(said) == {"the locked .deb files: 1 of 2 ready (1.5 MB)"}, said
    cache = tmp_path / aptdebs.CACHE / origin(url, T0).key
    assert files(tmp_path) == [cache / BIG.archive / BIG.path], "the slow file leaves nothing behind"


def test_a_transient_failure_is_tried_three_times_with_pauses_between(
    tmp_path: Path, direct: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: one more try at once, on the one connection that failed; none for a refused connection."""
    monkeypatch.setattr(aptdebs, "RETRY_S", (0.2, 0.4))  # 1 s and 2 s in use
    asked: list[str] = []

    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        asked.append(handler.path)
        if "/libc6/" in handler.path or asked.count(handler.path) < 3:
            handler.close_connection = True  # dropped, with no answer
        else:
            send(handler, GOOD["curl"])

    with answering(reply) as url:
        source = origin(url, T0)
        start = time.monotonic()
        with pytest.raises(FetchError) as caught:
            aptdebs.fetch([CURL, LIBC6], source, tmp_path)
        took = time.monotonic() - start
    assert str(caught.value) == (
        f"libc6=2.36-9+deb12u9: cannot read {source.location(LIBC6)}: Remote end closed connection without response"
    )
    assert collections.Counter(asked) == {
        "/mirror/debian/pool/main/c/curl/curl_7.88.1-10%2Bdeb12u8_all.deb": 3,
        "/mirror/debian-security/pool/main/l/libc6/libc6_2.36-9%2Bdeb12u9_all.deb": 3,
    }
    assert 0.6 <= took < 2, f"{took:.2f} s"
    assert (tmp_path / aptdebs.CACHE / source.key / CURL.archive / CURL.path).read_bytes() == GOOD["curl"]
    with socket.socket() as closed:  # a port nothing listens on: connection refused, three times
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(FetchError, match=r"^curl=7\.88\.1-10\+deb12u8: cannot read .*Connection refused"):
        aptdebs.fetch([CURL], origin(f"http://127.0.0.1:{port}/mirror", T0), tmp_path)
    assert time.monotonic() - start >= 0.6


CHILD = """
import signal, sys
from pathlib import Path
from dlimages.building import aptdebs
from dlimages.artifacts.oslock import Deb, Distro
signal.signal(signal.SIGINT, signal.default_int_handler)  # even where the shell that started the tests ignores it
debs = [Deb(name, "1.0", "debian", f"pool/main/{name}/{name}/{name}_1.0_all.deb", 100, "0" * 64) for name in "ab"]
debian12 = Distro.of("debian12", "debian", "bookworm")
aptdebs.fetch(debs, aptdebs.origin(sys.argv[1], "T", None, debian12), Path(sys.argv[2]))
"""


def fetching(url: str, root: Path) -> subprocess.Popen[str]:
    """A process fetching two trickled files from `url` into the cache under `root`, in parallel."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_fetch_killed_midway_leaves_nothing_in_the_cache(tmp_path: Path, direct: None) -> None:
    """Before: each download was written to a named `.fetch-*` file first, which SIGKILL left behind."""
    try:
        os.close(os.open(tmp_path, os.O_TMPFILE | os.O_WRONLY, 0o600))
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        pytest.skip("the file system under the tests' temporary folder has no unnamed files (O_TMPFILE)")
    started = threading.Event()
    with answering(trickle(started)) as url:
        folder = tmp_path / aptdebs.CACHE / origin(url, T0).key / "debian/pool/main/a/a"
        put(folder.parents[4], locked("a", "0.9", b"old"), b"old")  # there before, in the same folder
        before = files(tmp_path)
        with fetching(url, tmp_path) as child:
            try:
                assert started.wait(30), child.communicate(timeout=30)
                time.sleep(0.3)  # a byte or two written
            finally:
                child.kill()
    assert child.returncode == -signal.SIGKILL
    assert files(tmp_path) == before == [folder / "a_0.9_all.deb"]


def test_ctrl_c_stops_a_parallel_fetch_at_once(tmp_path: Path, direct: None) -> None:
    """Before: Ctrl-C waited for every download under way to end, as long as their servers liked."""
    started = threading.Event()
    with answering(trickle(started, seconds=30)) as url:
        with fetching(url, tmp_path) as child:
            try:
                assert started.wait(30), child.communicate(timeout=30)
                time.sleep(0.5)
                child.send_signal(signal.SIGINT)
                sent = time.monotonic()
                _, err = child.communicate(timeout=10)
                took = time.monotonic() - sent
            finally:
                child.kill()
    assert took < 2, f"stopped {took:.2f} s after Ctrl-C"
    assert err.rstrip().endswith("KeyboardInterrupt"), err
    assert files(tmp_path) == [], "nothing half-fetched is left"


def test_without_unnamed_files_a_named_one_is_used_and_removed(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.open

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "not on this file system")
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_tmpfile)
    put(server.folder, LIBC6, GOOD["libc6"])
    put(server.folder, CURL, b"something else\n")
    source = origin(server.url, T0)
    with pytest.raises(FetchError, match="the lock says"):
        aptdebs.fetch([LIBC6, CURL], source, tmp_path)
    cache = tmp_path / aptdebs.CACHE / source.key
    assert files(cache) == [cache / LIBC6.archive / LIBC6.path]
    assert (cache / LIBC6.archive / LIBC6.path).stat().st_mode & 0o777 == 0o644


# --- flat repositories and apt-repo folders, over real packages ----------------------------------------------------


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"these tests need {name} (Debian's dpkg / dpkg-dev packages): apt-get install dpkg-dev")
    return found


@pytest.fixture(scope="module")
def real_debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Deb, bytes]]:
    """Three small real packages, as the lock names them: by package name, its entry and its file."""
    dpkg_deb = tool("dpkg-deb")
    tool("dpkg-scanpackages")
    made: dict[str, tuple[Deb, bytes]] = {}
    for name, version, archive in (
        ("hello-a", "1.0+dfsg-1", "debian"),
        ("hello-b", "2.0-1~deb12u1", "debian-security"),
        ("hello-c", "3:0.1-2", "debian"),
    ):
        root = tmp_path_factory.mktemp(name)
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN/control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: Test <test@example.org>\n"
            f"Description: {name}, a package for the tests\n"
        )
        (root / "usr/share/doc" / name).mkdir(parents=True)
        (root / "usr/share/doc" / name / "README").write_text(f"{name}\n")
        out = root.parent / f"{name}.deb"
        subprocess.run(
            [dpkg_deb, "--build", "--root-owner-group", str(root), str(out)], check=True, capture_output=True
        )
        data = out.read_bytes()
        # the pool's file name has no epoch; the lock's version keeps it
        made[name] = (dataclasses.replace(locked(name, version.split(":")[-1], data, archive), version=version), data)
    return made


def stanzas(text: str) -> dict[str, dict[str, str]]:
    """A Packages index: each stanza's fields (continuation lines dropped), by package name."""
    found = {}
    for stanza in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if not line.startswith(" "))
        found[fields["Package"]] = fields
    return found


def repository(tmp_path: Path, debs: dict[str, tuple[Deb, bytes]]) -> Origin:
    """A folder as `invoke apt-repo` makes it, holding `debs`, as an origin."""
    for deb, data in debs.values():
        put(tmp_path / "from", deb, data)
    (tmp_path / "from").mkdir(exist_ok=True)
    (tmp_path / "from/Release").write_text("Suite: bookworm\n")
    return origin(str(tmp_path / "from"), T0)


def test_a_flat_repository_holds_exactly_the_locks_files_and_their_index(
    tmp_path: Path, real_debs: dict[str, tuple[Deb, bytes]]
) -> None:
    lock = lock_of(*(deb for deb, _ in real_debs.values()))
    source = repository(tmp_path, real_debs)
    folder = aptdebs.flat_repo(lock, source, tmp_path / "root", Runner())
    assert folder == tmp_path / "root" / aptdebs.repo_folder(lock, source)
    assert folder.parent == tmp_path / "root" / aptdebs.REPOS
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["Packages", "Release", *(deb.filename for deb, _ in real_debs.values())]
    )
    index = (folder / "Packages").read_text()
    listed = stanzas(index)
    assert sorted(listed) == sorted(real_debs)
    for name, (deb, _) in real_debs.items():
        assert listed[name]["Version"] == deb.version
        assert listed[name]["Filename"] == f"./{deb.filename}"
        assert listed[name]["SHA256"] == deb.sha256 == hashlib.sha256((folder / deb.filename).read_bytes()).hexdigest()
    release = (folder / "Release").read_text()
    assert release.startswith("Suite: bookworm\nCodename: bookworm\n") and "\nArchitectures: amd64 all\n" in release
    assert release.count("\nSHA256:\n") == 1
    raw = (folder / "Packages").read_bytes()
    assert release.endswith(f"\n {hashlib.sha256(raw).hexdigest()} {len(raw)} Packages\n")
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "no staging folder is left behind"


def test_a_flat_repository_is_made_once_per_lock(tmp_path: Path, real_debs: dict[str, tuple[Deb, bytes]]) -> None:
    lock = lock_of(*(deb for deb, _ in real_debs.values()))
    source = repository(tmp_path, real_debs)
    first = aptdebs.flat_repo(lock, source, tmp_path / "root", Runner())
    shutil.rmtree(tmp_path / "from")
    shutil.rmtree(tmp_path / "root" / aptdebs.CACHE)
    assert aptdebs.flat_repo(lock, source, tmp_path / "root", Runner(run=no_command)) == first
    other = lock_of(real_debs["hello-a"][0])
    with pytest.raises(FetchError, match=r"^hello-a=1\.0\+dfsg-1: cannot read "):
        aptdebs.flat_repo(other, source, tmp_path / "root", Runner(run=no_command))


def test_a_lock_with_a_bad_file_makes_no_repository(tmp_path: Path, real_debs: dict[str, tuple[Deb, bytes]]) -> None:
    deb, _ = real_debs["hello-a"]
    put(tmp_path / "from", deb, b"not the locked file")
    (tmp_path / "from/Release").write_text("Suite: bookworm\n")
    with pytest.raises(FetchError, match="the lock says"):
        aptdebs.flat_repo(lock_of(deb), origin(str(tmp_path / "from"), T0), tmp_path / "root", Runner())
    assert not (tmp_path / "root" / aptdebs.REPOS).exists()


def test_apt_repo_copies_every_locked_file_once_into_a_mirror_layout_with_an_index(
    tmp_path: Path, real_debs: dict[str, tuple[Deb, bytes]]
) -> None:
    a, b, c = (real_debs[name][0] for name in ("hello-a", "hello-b", "hello-c"))
    source = repository(tmp_path, real_debs)
    out = tmp_path / "out"
    sources = [aptdebs.AptDebsSource(lock, source) for lock in (lock_of(a, b), lock_of(b, c), lock_of(a))]
    assert aptdebs.export(sources, out, tmp_path / "root", Runner()) == 3
    for deb, data in real_debs.values():
        assert (out / deb.archive / deb.path).read_bytes() == data
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.deb")) == sorted(
        f"{deb.archive}/{deb.path}" for deb in (a, b, c)
    )
    listed = stanzas((out / "Packages").read_text())
    assert {name: fields["Filename"] for name, fields in listed.items()} == {
        deb.name: f"./{deb.archive}/{deb.path}" for deb in (a, b, c)
    }
    assert {name: fields["SHA256"] for name, fields in listed.items()} == {deb.name: deb.sha256 for deb in (a, b, c)}
    assert (out / "Release").is_file()
    # and it serves as an origin itself
    again = aptdebs.flat_repo(lock_of(b, c), origin(str(out), T0), tmp_path / "elsewhere", Runner())
    assert sorted(p.name for p in again.glob("*.deb")) == sorted([b.filename, c.filename])


def test_without_a_mirror_the_files_come_from_this_hosts_debian_mirror_else_the_public_archive(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.example.org/debian\nSuites: bookworm\n")
    assert aptdebs.host_mirrors([sources]) == {
        "debian": "http://deb.example.org/debian",
        "debian-security": "http://deb.example.org/debian-security",
    }
    ubuntu = tmp_path / "ubuntu.sources"
    ubuntu.write_text("Types: deb\nURIs: http://archive.example.org/ubuntu/\nSuites: noble\n")
    assert aptdebs.host_mirrors([ubuntu]) == {}
    assert dict(origin(None, T0, aptdebs.host_mirrors([ubuntu])).urls) == PUBLIC
