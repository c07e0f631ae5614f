"""ASCII-only grammars for every value that comes from outside (matrix.yaml, flags, environment, host files).

Each check returns what is wrong with a value, worded for the person who wrote it, or None when it is well formed.
A value that passes can be placed in a Dockerfile, a build argument or a quoted shell argument without changing
what they mean: no whitespace, no quotes, no shell or sed metacharacters, no credentials, nothing outside ASCII.
"""

from __future__ import annotations

import re

# Python's \d and \w match every script's digits and letters; these classes are spelled out on purpose.
VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9A-Fa-f:.]+\]")
# Unreserved characters of RFC 3986 and '/', plus %XX escapes: nothing a shell, sed or a Dockerfile reads specially.
_URL_PATH = re.compile(r"(?:/(?:[A-Za-z0-9._~+=,-]|%[0-9A-Fa-f]{2})*)*")
_URL = re.compile(r"(?P<scheme>[a-z]+)://(?P<authority>[^/]*)(?P<path>.*)", re.DOTALL)
MAX_URL = 2048

URL_ALLOWED = "http(s)://host[:port]/path with letters, digits and . _ ~ + = , - / %XX"


def url_problem(value: str, *, placeholders: tuple[str, ...] = ()) -> str | None:
    """What is wrong with a mirror or index URL, or None. `placeholders` (e.g. "{variant}") may appear in the path.

    Credentials (user:password@) are refused: they would land in build arguments, logs and the image history;
    private indexes take them through --netrc (a BuildKit secret) instead.
    """
    if not value:
        return "is empty"
    if len(value) > MAX_URL:
        return f"is longer than {MAX_URL} characters"
    if not value.isascii() or not value.isprintable():
        return "has characters outside printable ASCII"
    match = _URL.fullmatch(value)
    if match is None or match["scheme"] not in ("http", "https"):
        return "is not an http:// or https:// URL"
    authority, path = match["authority"], match["path"]
    if "@" in authority:
        return "carries credentials (user:password@): give them with --netrc FILE (a BuildKit secret) instead"
    host, port = authority, ""
    if not authority.endswith("]") and ":" in authority:
        host, _, port = authority.rpartition(":")
    if not _HOST.fullmatch(host):
        return f"has no valid host name ({host!r})"
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"has port {port!r}, not a number from 1 to 65535"
    for placeholder in placeholders:
        path = path.replace(placeholder, "x")
    if not _URL_PATH.fullmatch(path):
        bad = next((ch for ch in path if not re.fullmatch(r"[A-Za-z0-9._~+=,%/-]", ch)), "?")
        return f"has {bad!r} in its path (query strings, fragments and shell characters are not allowed)"
    return None


# Docker's reference grammar (distribution/reference), ASCII only.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
_DOMAIN_RE = re.compile(_DOMAIN)
_NAME_AND_TAG = re.compile(
    rf"(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
MAX_REFERENCE = 255
REFERENCE_ALLOWED = "[registry[:port]/]repository[:tag][@sha256:...], e.g. lab/pytorch-universal-dev:v1.0"


def reference_problem(value: str) -> str | None:
    """What is wrong with an image reference (a base image, or an image given to a task), or None."""
    if not value:
        return "is empty"
    if value.startswith("-"):
        return "starts with '-' (docker would read it as an option)"
    if not value.isascii() or not value.isprintable() or any(ch.isspace() for ch in value):
        return "has whitespace or characters outside printable ASCII"
    if len(value) > MAX_REFERENCE:
        return f"is longer than {MAX_REFERENCE} characters"
    first, slash, rest = value.partition("/")
    # As docker reads it: the first component names a registry only if it has a '.' or ':' or is localhost.
    if slash and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN_RE.fullmatch(first):
            return f"has no valid registry host ({first!r})"
        value = rest
    if not _NAME_AND_TAG.fullmatch(value):
        return "is not an image reference: lowercase path parts separated by '/', then an optional :tag"
    return None


def version_problem(value: str) -> str | None:
    if not value:
        return "is empty"
    if not VERSION.fullmatch(value):
        return "is not a version (digits separated by dots, e.g. 2.1)"
    if any(len(part) > 6 for part in value.split(".")):
        return "has a part longer than 6 digits"
    return None
