"""Docker image references: what `docker tag`, `docker push` and `docker run` accept, checked before any command runs.

Pure functions: `image_problems`, `registry_problems` and `ref_problems` word each problem for the person who typed
the value; `registry_ref` joins a registry and a local ref; `split_tag` cuts a ref into repository and tag.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from dlimages.core.errors import InputError, Problem
from dlimages.core.grammar import REFERENCE_ALLOWED, host_problem, reference_problem

REGISTRY_ALLOWED = "host[:port][/path], e.g. 127.0.0.1:5000 or registry.example.com/team"

# docker's reference grammar (distribution/reference): what `docker tag` accepts.
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9A-Fa-f:.]+\]")
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # ASCII only: \w would take every script's letters
_REFERENCE_CHARACTERS = re.compile(r"[A-Za-z0-9._:/@\[\]-]+")
MAX_NAME = 255  # docker refuses a name (registry and repository, no tag) longer than this: NameTotalLengthMax
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TAG_ALLOWED = "an image reference with a :tag and no @digest, e.g. ubuntu:22.04"
_SHOWN = 80  # a longer value is cut short in messages
HUB_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")  # Docker Hub, by each name docker takes


def image_problems(refs: Iterable[str], where: str = "--image") -> list[Problem]:
    """A problem for each image a task was given that docker would not read as exactly one image reference: an
    empty value, an option such as --help, whitespace, characters outside ASCII. Checked before anything runs."""
    problems: list[Problem] = []
    for ref in dict.fromkeys(refs):
        problem = reference_problem(ref)
        if problem is not None:
            problems.append(Problem(f"{where} {ref!r}", problem, REFERENCE_ALLOWED))
    return problems


def registry_problems(registry: str, where: str = "--registry") -> list[Problem]:
    """Everything wrong with one registry value (HOST[:PORT][/PATH]), worded for the person who typed it."""

    def problem(message: str) -> list[Problem]:
        shown = registry if len(registry) <= _SHOWN else f"{registry[: _SHOWN - 3]}..."
        return [Problem(where, f"'{shown}' {message}", REGISTRY_ALLOWED)]

    if not registry:
        return problem("is empty")
    if len(registry) > MAX_NAME - 2:  # '/' and at least one character of an image's own name must follow
        return problem(f"is {len(registry)} characters long: too long to begin an image name ({MAX_NAME} in all)")
    if "://" in registry:
        return problem("has a scheme: give the address only (docker picks https, or http for 127.0.0.1)")
    if any(ch.isspace() for ch in registry):
        return problem("contains whitespace")
    if registry.endswith("/"):
        return problem("ends with '/'")
    host_port, _, path = registry.partition("/")
    host, port = host_port, ""
    if not host_port.endswith("]") and ":" in host_port:
        host, _, port = host_port.rpartition(":")
    if not _HOST.fullmatch(host):
        return problem(f"has no valid host name ('{host}')")
    if too_long := host_problem(host):
        return problem(too_long)
    if port and not (re.fullmatch("[0-9]{1,5}", port) and 1 <= int(port) <= 65535):  # ASCII digits only
        return problem(f"has port '{port}', not a number from 1 to 65535")
    if not port and "." not in host and not host.startswith("[") and host != "localhost":
        # docker reads a first component without '.' or ':' as a Docker Hub namespace, so the push
        # would silently go to docker.io/<registry>/...
        return problem(
            "would be read by docker as a Docker Hub namespace: give a host with a dot, a port, or localhost"
        )
    if bad := [part for part in path.split("/") if not _PATH_PART.fullmatch(part)] if path else []:
        return problem(f"has path part '{bad[0]}': lowercase letters, digits and single '.', '_' or '-' between them")
    return []


def ref_problems(image_ref: str) -> list[Problem]:
    """Everything wrong with a local image ref that is to be pushed under a registry prefix."""

    def problem(message: str, allowed: str = "repository[:tag], e.g. lab/pytorch-universal-dev:v1.0") -> list[Problem]:
        return [Problem(f"image {image_ref!r}", message, allowed)]

    general = reference_problem(image_ref)
    if general is not None and (image_ref.startswith("-") or not _REFERENCE_CHARACTERS.fullmatch(image_ref)):
        return problem(general)  # empty, an option, whitespace, outside ASCII: said as such
    if "@" in image_ref:
        return problem("is a digest reference: push a tag")
    name, tag = split_tag(image_ref)
    if tag is not None and not _TAG.fullmatch(tag):
        return problem(f"has tag '{tag}': letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-'")
    parts = name.split("/")
    if not name or any(not _PATH_PART.fullmatch(part) for part in parts):
        return problem("is not a repository name: lowercase path parts separated by '/'")
    if len(parts) > 1 and ("." in parts[0] or parts[0] == "localhost"):
        return problem(f"already names a registry ('{parts[0]}'): give the repository without it")
    return [] if general is None else problem(general)  # e.g. longer than docker allows


def registry_ref(registry: str, image_ref: str) -> str:
    """The ref `image_ref` gets in `registry`: ("127.0.0.1:5000", "lab/x:v1") -> "127.0.0.1:5000/lab/x:v1"."""
    problems = registry_problems(registry) + ref_problems(image_ref)
    remote = f"{registry}/{image_ref}"
    if not problems and len(split_tag(remote)[0]) > MAX_NAME:  # the name, without the tag: docker's limit
        problems.append(Problem(f"image '{image_ref}'", f"with '{registry}' is longer than {MAX_NAME} characters"))
    if problems:
        raise InputError(problems)
    return remote


def names_registry(ref: str) -> bool:
    """Whether `ref` names its registry, as Docker reads it: a first component with a '.' or ':', or localhost."""
    first, slash, _ = ref.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost")


def registry_of(ref: str) -> str:
    """The registry host `ref` is pulled from, as Docker reads it ("docker.io" when it names none); a transport
    prefix (docker://) is dropped."""
    ref = ref.split("://", 1)[-1]
    return ref.partition("/")[0] if names_registry(ref) else "docker.io"


def split_tag(ref: str) -> tuple[str, str | None]:
    """("host:5000/a/b:t") -> ("host:5000/a/b", "t"): a ':' after the last '/' starts the tag."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return (ref[:colon], ref[colon + 1 :]) if colon > slash else (ref, None)


def tagged_ref_problem(ref: str, *, digest_why: str, untagged_why: str) -> str | None:
    """What keeps `ref` from being a repository:tag (no @digest), or None; the two reasons are the caller's."""
    problem = reference_problem(ref)
    if problem is not None:
        return problem
    if "@" in ref:
        return f"has an @digest: {digest_why}"
    if split_tag(ref)[1] is None:
        return f"has no :tag ({untagged_why})"
    return None


class DigestOutcome:
    """What a registry operation gave (Copied, Resolved): the digest, or why there is none."""

    digest: str | None
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.digest is not None


def tag_problem(ref: str) -> str | None:
    """What keeps `ref` from being a tag a cell pulls (and a key of the bases lock), or None."""
    if ref.startswith("_"):
        return "is not a key of the lock"
    return tagged_ref_problem(
        ref,
        digest_why="the key is the tag a digest is recorded for",
        untagged_why="docker would read it as :latest, which no base should be",
    )


def quoted(value: object, limit: int = 80) -> str:
    """A value from the file, shown safely: ASCII escapes, and cut short when long."""
    text = ascii(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def registry_is_loopback(ref: str) -> bool:
    """Whether `ref` names a registry on this machine (127.0.0.0/8, ::1, localhost), e.g. 127.0.0.1:5000/ubuntu:22.04.

    Such a registry is often plain HTTP (dockerd treats 127.0.0.0/8 as insecure by default, and .ci/registry.sh
    serves HTTP), and skopeo insists on verified HTTPS unless told `--tls-verify=false`. Dropping verification there
    costs nothing: loopback traffic never leaves the machine, so there is no network to attack it on. Everywhere
    else it stays on unless the caller asks: for Docker Hub, `--tls-verify=false` even lets skopeo fall back to HTTP.
    """
    if not names_registry(ref):
        return False  # a Docker Hub name
    first = ref.partition("/")[0]
    host = first[1 : first.find("]")] if first.startswith("[") else first.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
