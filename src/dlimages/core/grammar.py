"""ASCII-only grammars for every value that comes from outside (matrix.yaml, flags, environment, host files).

Each check returns what is wrong with a value, worded for the person who wrote it, or None when it is well formed.
A value that passes can be placed in a Dockerfile, a build argument or a quoted shell argument without changing
what they mean: no whitespace, no quotes, no shell or sed metacharacters, no credentials, nothing outside ASCII.
"""

from __future__ import annotations

import re

# Python's \d and \w match every script's digits and letters; these classes are spelled out on purpose.
VERSION = re.compile(r"[0-9]+(\.[0-9]+)*")
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# A DNS name (RFC 1035 section 2.3.4, RFC 1123 section 2.1): at most 63 characters a label, 253 in all (255 octets
# on the wire, less the length byte of the first label and the final root label).
MAX_HOST_LABEL = 63
MAX_HOST = 253
_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9A-Fa-f:.]+\]")
# Unreserved characters of RFC 3986 and '/', plus %XX escapes: nothing a shell, sed or a Dockerfile reads specially.
_URL_CHAR = r"[A-Za-z0-9._~+=,-]"
_URL_PATH = re.compile(rf"(?:/(?:{_URL_CHAR}|%[0-9A-Fa-f]{{2}})*)*")
# A documentation link may point into its page; such links are shown to people, never given to a shell.
_URL_FRAGMENT = re.compile(rf"#(?:{_URL_CHAR}|/|%[0-9A-Fa-f]{{2}})*")
_URL = re.compile(r"(?P<scheme>[a-z]+)://(?P<authority>[^/]*)(?P<path>.*)", re.DOTALL)
MAX_URL = 2048

URL_ALLOWED = "http(s)://host[:port]/path with letters, digits and . _ ~ + = , - / %XX"


def url_problem(value: str, *, placeholders: tuple[str, ...] = (), fragment: bool = False) -> str | None:
    """What is wrong with a mirror or index URL, or None. `placeholders` (e.g. "{variant}") may appear in the path;
    `fragment` allows a trailing #fragment (documentation links, which never reach a build or a shell).

    Credentials (user:password@) are refused: they would land in build arguments, logs and the image history;
    private indexes take them through --netrc (a BuildKit secret) instead. The value itself is never quoted back:
    it may hold a secret.
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
    if fragment and "#" in path:
        path, hash_, rest = path.partition("#")
        if not _URL_FRAGMENT.fullmatch(hash_ + rest):
            return "has a #fragment with characters other than letters, digits and . _ ~ + = , - / %XX"
    for placeholder in placeholders:
        path = path.replace(placeholder, "x")
    if not _URL_PATH.fullmatch(path):
        bad = next((ch for ch in path if not re.fullmatch(r"[A-Za-z0-9._~+=,%/-]", ch)), None)
        if bad is None:
            return "has a '%' in its path that does not start a %XX escape"
        if bad in "{}" and placeholders:
            return f"has a format field other than {' or '.join(placeholders)}, the only placeholder allowed"
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
    return _parse_reference(value)[0]


def repository_problem(value: str) -> str | None:
    """What is wrong with a repository that each cell completes with its own tag (e.g. nvidia/cuda), or None."""
    problem, match = _parse_reference(value)
    if problem is None and match is not None and (match["tag"] or match["digest"]):
        return "has a :tag or @digest; give the repository alone (each cell adds its own tag)"
    return problem


def _parse_reference(value: str) -> tuple[str | None, re.Match[str] | None]:
    """A reference's problem, or None and the match of its path, tag and digest (the registry host removed)."""
    if not value:
        return "is empty", None
    if value.startswith("-"):
        return "starts with '-' (docker would read it as an option)", None
    if not value.isascii() or not value.isprintable() or any(ch.isspace() for ch in value):
        return "has whitespace or characters outside printable ASCII", None
    if len(value) > MAX_REFERENCE:
        return f"is longer than {MAX_REFERENCE} characters", None
    first, slash, rest = value.partition("/")
    # As docker reads it: the first component names a registry only if it has a '.' or ':' or is localhost.
    if slash and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN_RE.fullmatch(first):
            return f"has no valid registry host ({first!r})", None
        value = rest
    match = _NAME_AND_TAG.fullmatch(value)
    if match is None:
        return "is not an image reference: lowercase path parts separated by '/', then an optional :tag", None
    return None, match


def host_problem(host: str) -> str | None:
    """What breaks a registry host name's DNS limits (63 characters a label, 253 in all), or None. An IPv6
    address in brackets has none to break."""
    if host.startswith("["):
        return None
    if len(host) > MAX_HOST:
        return f"has a host name of {len(host)} characters; DNS allows {MAX_HOST}"
    longest = max(host.split("."), key=len)
    if len(longest) > MAX_HOST_LABEL:
        return f"has a host name part of {len(longest)} characters; DNS allows {MAX_HOST_LABEL}"
    return None


# A project name as PEP 508 writes it (and PyPI accepts it): ASCII letters and digits, with '.', '_', '-' inside.
PROJECT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
MAX_PROJECT_NAME = 100
PROJECT_NAME_ALLOWED = "a PyPI project name: ASCII letters and digits, with '.', '_' or '-' inside, e.g. numpy"


def project_name_problem(value: str) -> str | None:
    """What is wrong with a Python package (PyPI project) name given on the command line, or None."""
    if not value:
        return "is empty"
    if len(value) > MAX_PROJECT_NAME:
        return f"is longer than {MAX_PROJECT_NAME} characters"
    if not PROJECT_NAME.fullmatch(value):  # fullmatch: a final newline does not slip through as it does with `$`
        return "is not a package name"
    return None


def count_problem(value: str, least: int, most: int) -> str | None:
    """What is wrong with a whole number typed as a flag, or None: ASCII digits only (int() also reads '\uff11',
    '\u0663', ' 3' and '1_000') and from `least` to `most`."""
    if not re.fullmatch(r"[0-9]{1,9}", value) or not least <= int(value) <= most:
        return f"is {value[:40]!r}, not a whole number from {least} to {most} in ASCII digits"
    return None


def version_problem(value: str) -> str | None:
    if not value:
        return "is empty"
    if not VERSION.fullmatch(value):
        return "is not a version (digits separated by dots, e.g. 2.1)"
    if any(len(part) > 6 for part in value.split(".")):
        return "has a part longer than 6 digits"
    return None
