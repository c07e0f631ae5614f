"""Asking a registry which digest a tag names now (skopeo, through a Runner), and whether a reference names a
registry on this machine. Never raises for what a registry does: each answer is a `Resolved`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlimages.core.references import DIGEST, TAG_ALLOWED, DigestOutcome, quoted, registry_is_loopback, tag_problem
from dlimages.core.runner import Runner

# The platform whose image skopeo reads from a multi-platform tag: the only one the matrix builds (Linux x86_64).
# It does not change the digest (that of the index itself); a tag without such an image is an error worth seeing.
PLATFORM_OS, PLATFORM_ARCH = "linux", "amd64"
RESOLVE_TIMEOUT_S = 60.0  # one manifest, one per-platform manifest, one config blob: seconds even on a slow link


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
    problem = tag_problem(ref)
    if problem is not None:
        return Resolved(ref, problem=f"{problem} (allowed: {TAG_ALLOWED})")
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
        return Resolved(ref, problem=f"skopeo printed {quoted(printed)}, not a digest")
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
