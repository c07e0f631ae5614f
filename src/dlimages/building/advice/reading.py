"""Reading a failed build's output: the step BuildKit reports as failed, the line that shows it (shortened), and why
a connection failed, in the words the advice uses."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

EVIDENCE_CHARS = 320  # the quoted line of output, shortened in the middle beyond this
STEP_CHARS = 90

_STEP_LINE = re.compile(r"^#(\d+) (?:\d+\.\d+ )?(.*)$")
PREFIX = re.compile(r"^(?:#\d+ )?(?:\d+\.\d+ )?")  # BuildKit's step number and time, also in its error recap
_EXIT_CODE = re.compile(r"did not complete successfully: exit code: (\d+)")


@dataclass(frozen=True)
class Step:
    """The step BuildKit reports as failed: its header ("[stage-0 4/9] RUN ..."), its own output lines without the
    `#N` and time prefixes, and the build's final `ERROR:` lines; every line when the output is not BuildKit's."""

    header: str
    lines: tuple[str, ...]
    buildkit: bool

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def exit_code(self) -> str | None:
        found = _EXIT_CODE.search(self.text)
        return found.group(1) if found else None


def failed_step(output: Sequence[str]) -> Step:
    parsed = [(m.group(1), m.group(2)) if (m := _STEP_LINE.match(line)) else (None, line) for line in output]
    errors = [n for n, text in parsed if n is not None and text.startswith("ERROR:")]
    failed = next((n for n, text in parsed if n in errors and "context canceled" not in text), None)
    failed = failed or (errors[0] if errors else None)
    if failed is None:
        return Step("", tuple(line.strip() for line in output), buildkit=False)
    own = [text for n, text in parsed if n == failed]
    header = next((text for text in own if text.startswith("[")), "")
    final = [text.strip() for n, text in parsed if n is None and text.startswith("ERROR:")]
    return Step(header, tuple(text for text in own if text != header) + tuple(final), buildkit=True)


def shorten(text: str, limit: int = EVIDENCE_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def step_name(header: str) -> str:
    """A failed step's header without its mounts, shortened: "[stage-0 4/9] RUN umask 0022 && ..."."""
    text = " ".join(word for word in header.split() if not word.startswith("--mount="))
    return text if len(text) <= STEP_CHARS else text[: STEP_CHARS - 3] + "..."


def evidence_of(lines: Iterable[str], needle: str) -> str | None:
    """The last line that says `needle` (any case), shortened; None when none does."""
    found = [line for line in lines if needle.lower() in line.lower()]
    return shorten(PREFIX.sub("", found[-1].strip())) if found else None


# --- why a connection failed, as the advice says it ------------------------------------------------------------------

Trouble = Literal["down", "dns", "tls", "auth", "rate", "timeout", "http", "missing", "proxy", "other"]

# (what the error says, lowercase; how the advice says it; what kind of trouble), specific before general.
_REASONS: tuple[tuple[str, str, Trouble], ...] = (
    ("connection refused", "connection refused", "down"),
    ("no such host", "the name does not resolve (no such host)", "dns"),
    ("name or service not known", "the name does not resolve", "dns"),
    ("temporary failure in name resolution", "the name does not resolve", "dns"),
    ("temporary failure resolving", "the name does not resolve", "dns"),
    ("could not resolve", "the name does not resolve", "dns"),
    ("no address associated with hostname", "the name does not resolve", "dns"),
    ("certificate_verify_failed", "its TLS certificate is not trusted (CERTIFICATE_VERIFY_FAILED)", "tls"),
    ("x509:", "its TLS certificate is not trusted (x509)", "tls"),
    ("certificate verification failed", "its TLS certificate is not trusted", "tls"),
    ("sslerror(permissionerror", "pip cannot read its CA bundle (permission denied)", "tls"),
    ("401 unauthorized", "it asks for credentials (401 Unauthorized)", "auth"),
    ("http error 401", "it asks for credentials (401)", "auth"),
    ("403 forbidden", "it refused access (403 Forbidden)", "auth"),
    ("http error 403", "it refused access (403)", "auth"),
    ("pull access denied", "pull access denied (no such repository, or it needs credentials)", "auth"),
    ("unauthorized", "it asks for credentials (unauthorized)", "auth"),
    ("authentication required", "it asks for credentials", "auth"),
    ("toomanyrequests", "rate limited (429 Too Many Requests)", "rate"),
    ("429 too many requests", "rate limited (429 Too Many Requests)", "rate"),
    ("server gave http response to https client", "it speaks plain HTTP, the engine asked for HTTPS", "http"),
    ("cannot connect to proxy", "the proxy cannot be reached", "proxy"),
    ("proxyerror", "the proxy refused the connection", "proxy"),
    ("network is unreachable", "the network is unreachable", "down"),
    ("timed out", "timed out", "timeout"),
    ("timeout", "timed out", "timeout"),
    ("context deadline exceeded", "timed out", "timeout"),
    ("404  not found", "404 Not Found (the mirror lacks the file)", "missing"),
    ("404 not found", "404 Not Found", "missing"),
    ("manifest unknown", "no such image there (manifest unknown)", "missing"),
    (": not found", "no such image there (not found)", "missing"),
    ("could not connect to", "cannot connect", "down"),
    ("unable to connect to", "cannot connect", "down"),
)


def reason(text: str) -> tuple[str, Trouble]:
    lowered = text.lower()
    for needle, said, trouble in _REASONS:
        if needle in lowered:
            return said, trouble
    return shorten(text, 120), "other"


def netloc(url: str) -> str:
    """host[:port] of a URL, without the scheme's default port."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port
    return host if port is None or (parts.scheme, port) in (("https", 443), ("http", 80)) else f"{host}:{port}"


def either(names: Sequence[str]) -> str:
    return "|".join(names)
