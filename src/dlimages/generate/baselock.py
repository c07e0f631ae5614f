"""The bases lock: the digest each registry base image's tag named when it was last resolved, so that builds start
FROM `tag@digest` and a rebuilt or deleted upstream tag (NVIDIA rebuilds and deletes its CUDA tags) changes nothing.

Deciding is pure (`BaseLock.load`/`pinned`, `pulled_bases`; what a build starts FROM is dlimages.building.basesource's);
only `resolve_digest` and `refresh` run a command (`skopeo`, through a `Runner`). Bases made here (`bootstrap_base`
cells) are never pulled, never locked.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.references import DigestOutcome, tagged_ref_problem
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell

LOCK_FILE = Path("images/bases.lock.json")  # relative to the repository root
COMMENT_KEY = "_comment"
COMMENT = (
    "The digest each registry base image tag named when last resolved; builds pull tag@digest. "
    f"Written by `{usage.BASES_LOCK}` (run it where the registries are reachable); do not edit by hand."
)
MAX_LOCK_BYTES = 1 << 20  # a few hundred bytes per base: anything near this is not a lock
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
DIGEST_ALLOWED = f"sha256: and 64 lowercase hex digits, as `{usage.BASES_LOCK}` writes it"
KEY_ALLOWED = f"{COMMENT_KEY!r} or an image reference with a :tag and no @digest, e.g. ubuntu:22.04"
# The platform whose image skopeo reads from a multi-platform tag: the only one the matrix builds (Linux x86_64).
# It does not change the digest (that of the index itself); a tag without such an image is an error worth seeing.
PLATFORM_OS, PLATFORM_ARCH = "linux", "amd64"
RESOLVE_TIMEOUT_S = 60.0  # one manifest, one per-platform manifest, one config blob: seconds even on a slow link


def unpinned_warning(ref: str) -> str:
    return (
        f"base {ref} has no recorded digest in {LOCK_FILE.as_posix()}: pulled by tag, so this build is not "
        f"reproducible; `{usage.BASES_LOCK}` records it where the registry is reachable"
    )


@dataclass(frozen=True)
class BaseLock:
    """Tag -> digest, e.g. "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04" -> "sha256:<64 hex>": the digest of what
    the tag names (the manifest list or OCI index of a multi-platform tag), i.e. what `tag@digest` pulls."""

    digests: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Sorted and read-only: a lock is a value, and its order is the order it is written in.
        object.__setattr__(self, "digests", MappingProxyType(dict(sorted(self.digests.items()))))

    @classmethod
    def load(cls, path: Path) -> BaseLock:
        """The lock in `path`; a missing file is an empty lock. Every problem of a malformed file is reported at
        once (InputError), each naming the file, the key and what is allowed."""
        text = _read_text(path)
        if text is None:
            return cls()
        where = str(path)
        try:
            pairs = json.loads(text, object_pairs_hook=_Pairs)
        except json.JSONDecodeError as error:
            raise InputError(
                [Problem(f"{where}:{error.lineno}", f"is not JSON: {error.msg}", "a JSON object of tag -> digest")]
            ) from None
        if not isinstance(pairs, _Pairs):
            raise InputError([Problem(where, "is not a JSON object", "a JSON object of tag -> digest")])
        problems: list[Problem] = []
        digests: dict[str, str] = {}
        seen: set[str] = set()
        for key, value in pairs:
            problems += _entry_problems(where, key, value, duplicate=key in seen)
            seen.add(key)
            if key != COMMENT_KEY and isinstance(value, str):
                digests[key] = value
        if problems:
            raise InputError(problems, heading=f"{where} is not a valid bases lock:")
        return cls(digests)

    def pinned(self, ref: str) -> str | None:
        """`ref@sha256:...` when the lock records `ref`, else None."""
        digest = self.digests.get(ref)
        return None if digest is None else f"{ref}@{digest}"

    def text(self) -> str:
        """The file's content: the comment first, then the tags in sorted order, one per line; ASCII only."""
        return json.dumps({COMMENT_KEY: COMMENT, **self.digests}, indent=2, ensure_ascii=True) + "\n"

    def write(self, path: Path) -> None:
        """Write the lock atomically: a reader, or an interrupted write, sees the old file or the new one."""
        write_atomic(path, self.text())


class _Pairs(list[tuple[str, object]]):
    """A JSON object's members in file order, duplicates kept (json's dict would silently keep the last)."""


def _read_text(path: Path) -> str | None:
    """The UTF-8 text of a regular file of at most MAX_LOCK_BYTES, or None when there is no file."""
    try:
        # Non-blocking open and a regular-file check: a FIFO or a link to /dev/zero must not hang or fill memory.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InputError([Problem(str(path), f"cannot read: {error.strerror}")]) from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise InputError([Problem(str(path), "cannot read: not a regular file")])
        with open(descriptor, "rb", closefd=False) as file:
            raw = file.read(MAX_LOCK_BYTES + 1)
    except OSError as error:
        raise InputError([Problem(str(path), f"cannot read: {error.strerror}")]) from None
    finally:
        os.close(descriptor)
    if len(raw) > MAX_LOCK_BYTES:
        raise InputError([Problem(str(path), f"is larger than {MAX_LOCK_BYTES} bytes: not a bases lock")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise InputError([Problem(f"{path}:{line}", f"is not UTF-8 (byte 0x{raw[error.start]:02x})")]) from None


def _entry_problems(where: str, key: str, value: object, *, duplicate: bool) -> list[Problem]:
    shown = f"{where}: key {_quoted(key, 300)}"
    if duplicate:
        return [Problem(shown, "appears more than once", "each key once")]
    if key == COMMENT_KEY:
        return [] if isinstance(value, str) else [Problem(shown, "is not a string", "a text comment")]
    problem = lock_key_problem(key)
    if problem is not None:
        return [Problem(shown, problem, KEY_ALLOWED)]
    if not (isinstance(value, str) and DIGEST.fullmatch(value)):
        return [Problem(shown, f"has the value {_quoted(value)}, not a digest", DIGEST_ALLOWED)]
    return []


def lock_key_problem(ref: str) -> str | None:
    """What keeps `ref` from being a key of the lock (a tag a cell pulls), or None."""
    if ref.startswith("_"):
        return "is not a key of the lock"
    return tagged_ref_problem(
        ref,
        digest_why="the key is the tag a digest is recorded for",
        untagged_why="docker would read it as :latest, which no base should be",
    )


def _quoted(value: object, limit: int = 80) -> str:
    """A value from the file, shown safely: ASCII escapes, and cut short when long."""
    text = ascii(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


# --- which bases, and what a build starts FROM -------------------------------------------------------------------


def _is_pulled(cell: Cell) -> bool:
    # A base the matrix already gives with @digest is pinned without the lock.
    return not cell.bootstrap_base and "@" not in cell.base_image


def pulled_bases(cells: Iterable[Cell]) -> list[str]:
    """The registry bases the cells start FROM, each once, sorted: not those made here (`bootstrap_base`)."""
    return sorted({cell.base_image for cell in cells if _is_pulled(cell)})


# --- asking the registry -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved(DigestOutcome):
    """What the registry said about one tag: its digest, or why there is none."""

    ref: str
    digest: str | None = None
    problem: str | None = None

    def __str__(self) -> str:
        return f"{self.ref}: {self.digest if self.digest is not None else self.problem}"


_SKOPEO_FATAL = re.compile(r'level=\w+ msg="(?P<msg>.*)"\s*$')
_HUNG = re.compile(r"context deadline exceeded", re.I)
_PING = re.compile(r"pinging container registry", re.I)
_NO_PLATFORM = re.compile(r"no image found in (?:image index|manifest list)", re.I)
_NOT_FOUND = re.compile(r"manifest unknown|name unknown|not found|\b404\b", re.I)
_REFUSED = re.compile(r"unauthorized|authentication required|\bdenied\b|\b401\b|\b403\b", re.I)
_UNREACHABLE = re.compile(
    r"connection refused|no such host|network is unreachable|no route to host"
    r"|i/o timeout|TLS handshake|x509:|certificate|server gave HTTP response to HTTPS client|\bEOF\b",
    re.I,
)


def registry_is_loopback(ref: str) -> bool:
    """Whether `ref` names a registry on this machine (127.0.0.0/8, ::1, localhost), e.g. 127.0.0.1:5000/ubuntu:22.04.

    Such a registry is often plain HTTP (dockerd treats 127.0.0.0/8 as insecure by default, and .ci/registry.sh
    serves HTTP), and skopeo insists on verified HTTPS unless told `--tls-verify=false`. Dropping verification there
    costs nothing: loopback traffic never leaves the machine, so there is no network to attack it on. Everywhere
    else it stays on unless the caller asks: for Docker Hub, `--tls-verify=false` even lets skopeo fall back to HTTP.
    """
    first, slash, _ = ref.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return False  # a Docker Hub name
    host = first[1 : first.find("]")] if first.startswith("[") else first.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def skopeo_argv(ref: str, *, tls_verify: bool = True, timeout: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """The command that prints the digest of what `ref` names: the same argv in a dry run and a real one.

    Why `--format {{.Digest}}` and not `--raw` hashed here: `tag@digest` pins the sha256 of the manifest bytes the
    registry serves, and the Runner captures text, which turns CRLF into LF and replaces bytes that are not UTF-8,
    so hashing its copy is not exact (a manifest with CRLF, pushed to the test registry, hashed to another digest).
    With `{{.Digest}}` skopeo hashes the bytes it received (`Digest` is that of the top-level manifest: the index
    of a multi-platform tag, as skopeo-inspect(1) says) and prints ASCII that text capture cannot change; no shell,
    pipe or temporary file. The price: skopeo also reads the linux/amd64 image's manifest and config (two small
    requests), and fails for a tag without such an image, which the matrix could not build from anyway.
    `--no-tags`: without it skopeo also lists every tag of the repository (thousands for nvidia/cuda).
    """
    return [
        "skopeo",
        "--override-os",
        PLATFORM_OS,
        "--override-arch",
        PLATFORM_ARCH,
        "--command-timeout",  # skopeo gives up on its own, saying where it hung, before the Runner kills it
        f"{timeout:g}s",
        "inspect",
        "--no-tags",
        "--format",
        "{{.Digest}}",
        f"--tls-verify={str(tls_verify and not registry_is_loopback(ref)).lower()}",
        f"docker://{ref}",
    ]


def resolve_digest(
    ref: str, runner: Runner, *, tls_verify: bool = True, timeout: float = RESOLVE_TIMEOUT_S
) -> Resolved:
    """Ask the registry which digest the tag `ref` names now. Never raises for what a registry does: a tag not
    there, a registry not reachable or hanging, skopeo missing all come back as `Resolved.problem`."""
    problem = lock_key_problem(ref)
    if problem is not None:
        return Resolved(ref, problem=f"{problem} (allowed: {KEY_ALLOWED})")
    done = runner(skopeo_argv(ref, tls_verify=tls_verify, timeout=timeout), timeout=timeout + 15)
    if done.missing:
        return Resolved(
            ref, problem=f"skopeo is not installed ({done.last_line}); `bash scripts/engine.sh` installs it"
        )
    if done.hung:
        return Resolved(ref, problem=f"the registry did not answer within {timeout:g} s (skopeo was stopped)")
    said = _skopeo_message(done.last_line)
    if not done.ok:
        return Resolved(ref, problem=_failure(said, timeout))
    printed = done.out.strip()
    if not DIGEST.fullmatch(printed):
        return Resolved(ref, problem=f"skopeo printed {_quoted(printed)}, not a digest")
    return Resolved(ref, digest=printed)


def _skopeo_message(line: str) -> str:
    """skopeo's fatal line without its logrus frame: `time="..." level=fatal msg="X"` -> X."""
    match = _SKOPEO_FATAL.search(line)
    return match["msg"].replace('\\"', '"').replace("\\\\", "\\") if match else line


def _failure(said: str, timeout: float) -> str:
    if _HUNG.search(said):
        return f"the registry did not answer within {timeout:g} s (skopeo: {said})"
    if _PING.search(said):  # before anything else: a 404 from a ping means no registry there, not no tag
        return f"the registry is not reachable (skopeo: {said})"
    if _NO_PLATFORM.search(said):
        return f"the tag has no {PLATFORM_OS}/{PLATFORM_ARCH} image, the platform the matrix builds (skopeo: {said})"
    if _NOT_FOUND.search(said):
        return f"the registry does not have this tag (deleted, or never pushed) (skopeo: {said})"
    if _REFUSED.search(said):
        # Docker Hub answers "denied" for a repository that does not exist, too.
        return f"the registry refused it: no such repository, or it needs `docker login` (skopeo: {said})"
    if _UNREACHABLE.search(said):
        return f"the registry is not reachable (skopeo: {said})"
    return f"skopeo failed: {said}"


def refresh(
    lock: BaseLock, refs: Iterable[str], runner: Runner, *, tls_verify: bool = True
) -> tuple[BaseLock, list[Resolved]]:
    """A new lock with each of `refs` that resolved set to its digest now; the others keep what they had (or stay
    unrecorded): never dropped, never guessed. Returns every result in order, for the caller to report."""
    results = [resolve_digest(ref, runner, tls_verify=tls_verify) for ref in dict.fromkeys(refs)]
    digests = dict(lock.digests)
    for result in results:
        if result.digest is not None:
            digests[result.ref] = result.digest
    return BaseLock(digests), results
