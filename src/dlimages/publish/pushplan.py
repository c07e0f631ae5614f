"""Deciding a push, purely: the (registry, ref) pairs to push, what a push's result holds, and what docker's and a
registry's answers mean (how a command failed, which digest was pushed, what a tag serves, whether dockerd skips TLS).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dlimages.core.errors import InputError, Problem
from dlimages.core.references import REGISTRY_ALLOWED, ref_problems, registry_problems, registry_ref, split_tag

Failure = Literal["auth", "transient", "unreachable", "other"]

MAX_RETRIES = 10  # backoff doubles from 2 s: ten retries already wait 34 minutes in all
RETRIES_ALLOWED = f"a whole number from 0 to {MAX_RETRIES}"

_DIGEST_LINE = re.compile(r"^(?P<tag>\S+): digest: (?P<digest>sha256:[0-9a-f]{64}) size: \d+\s*$", re.MULTILINE)

# Order matters: a refusal of credentials must not be mistaken for a flaky network just because the text also says
# "EOF" or "timeout".
_AUTH = re.compile(r"unauthorized|no basic auth credentials|authentication required|\bdenied\b|\b40[13]\b", re.I)
_UNREACHABLE = re.compile(r"no such host|server misbehaving", re.I)  # a typo'd host does not heal by waiting
_TRANSIENT = re.compile(
    r"connection refused|connection reset|broken pipe|no route to host|network is unreachable"
    r"|TLS handshake timeout|i/o timeout|timed? ?out|timeout|\bEOF\b|too many requests|\b429\b|nothing came from"
    r"|status(?: code)?:? *5\d\d\b"
    r"|\b5\d\d (?:internal server error|bad gateway|service unavailable|gateway time-?out|insufficient storage)",
    re.I,
)


@dataclass(frozen=True)
class PushTarget:
    """One local ref and the remote ref it is pushed as."""

    registry: str
    ref: str
    remote_ref: str

    @property
    def repository(self) -> str:
        """The remote ref without its tag: what `docker pull REPOSITORY@DIGEST` takes."""
        return split_tag(self.remote_ref)[0]

    @property
    def tag(self) -> str:
        return split_tag(self.remote_ref)[1] or "latest"

    def result(self, error: str | None, attempts: int = 0, digest: str | None = None, **seconds: float) -> PushResult:
        """Verified exactly when nothing went wrong."""
        return PushResult(self.registry, self.ref, self.remote_ref, digest, error is None, attempts, error, **seconds)


@dataclass(frozen=True)
class PushResult(PushTarget):
    """One local ref pushed to one registry, and whether the registry provably serves that very image."""

    digest: str | None = None
    verified: bool = False
    attempts: int = 0
    error: str | None = None
    push_seconds: float = 0.0
    verify_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verified and self.error is None

    def as_json(self) -> dict[str, object]:
        rounded = {"push_seconds": round(self.push_seconds, 3), "verify_seconds": round(self.verify_seconds, 3)}
        return asdict(self) | rounded


@dataclass(frozen=True)
class RemoteTag:
    """What a registry serves under a tag: the manifest's digest and the image it names (its config digest, which
    is the local image ID of that image), or, for a multi-platform index, how many images it lists."""

    digest: str | None
    image_id: str | None
    platforms: int = 1

    def describe(self) -> str:
        if self.image_id is None:
            return f"a multi-platform index of {self.platforms} images"
        return f"manifest {self.digest} (image {self.image_id})"


def retries_from_flag(text: str) -> int:
    """--retries as typed (Invoke hands it over as text, so a wrong type is exit 2 here, not a traceback there)."""
    if not re.fullmatch(r"[0-9]{1,3}", text) or int(text) > MAX_RETRIES:
        raise InputError([Problem("--retries", f"is {text!r}", RETRIES_ALLOWED)])
    return int(text)


def plan_push(
    refs: Sequence[str], registries: Sequence[str], names: Mapping[str, str] | None = None
) -> list[PushTarget]:
    """Every (registry, ref) pair in push order, registries outermost; every input problem reported at once.
    A ref is published under its own name, or under `names[ref]` (tags.published_refs) where given."""
    names = names or {}
    problems: list[Problem] = []
    if not refs:
        problems.append(Problem("images", "nothing to push", "at least one built image ref"))
    if not registries:
        problems.append(Problem("--registry", "no registry given", REGISTRY_ALLOWED))
    for registry in dict.fromkeys(registries):
        problems += registry_problems(registry)
    for ref in dict.fromkeys(refs):
        problems += ref_problems(ref)
        problems += ref_problems(names[ref]) if names.get(ref, ref) != ref else []
    if problems:
        raise InputError(problems)
    return [
        PushTarget(registry, ref, registry_ref(registry, names.get(ref, ref)))
        for registry in dict.fromkeys(registries)
        for ref in dict.fromkeys(refs)
    ]


def failure_kind(output: str) -> Failure:
    """How a failed docker command failed: only "transient" is worth retrying."""
    if _AUTH.search(output):
        return "auth"
    if _UNREACHABLE.search(output):
        return "unreachable"
    if _TRANSIENT.search(output):
        return "transient"
    return "other"


def parse_remote_tag(output: str) -> RemoteTag | None:
    """`docker manifest inspect -v` output: one image (an object) or an index (an array of images); None when it
    is neither, so the caller cannot tell what the tag holds."""
    try:
        data = json.loads(output)
        if isinstance(data, list):
            return RemoteTag(None, None, len(data))
        raw = base64.b64decode(data["Raw"], validate=True)
        config = json.loads(raw)["config"]["digest"]
        digest = data["Descriptor"]["digest"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(config, str) or digest != "sha256:" + hashlib.sha256(raw).hexdigest():
        return None  # no config digest, or the descriptor does not describe these bytes
    return RemoteTag(digest, config)


def daemon_treats_as_insecure(registry: str, config: Mapping[str, Any]) -> bool:
    """Whether dockerd talks to `registry` over plain HTTP or unverified TLS (its `insecure-registries`, 127.0.0.0/8
    by default; `config` is `docker info`'s RegistryConfig). Only then may `docker manifest inspect --insecure`
    do the same: elsewhere it would send the registry's credentials over a connection nobody verified.

    A host name counts only when listed by name: dockerd also resolves names into the insecure CIDRs, which this
    does not (an HTTP registry known only that way reads as "no such manifest" and is pushed as if new).
    """
    host_port = registry.split("/", 1)[0]
    index = (config.get("IndexConfigs") or {}).get(host_port)
    if isinstance(index, dict) and isinstance(index.get("Secure"), bool):
        return not index["Secure"]
    host = host_port[1 : host_port.find("]")] if host_port.startswith("[") else host_port.split(":", 1)[0]
    try:
        address = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        return False
    for cidr in config.get("InsecureRegistryCIDRs") or ():
        with contextlib.suppress(ValueError, TypeError):
            if address in ipaddress.ip_network(cidr, strict=False):
                return True
    return False


def parse_digest(output: str, tag: str | None = None) -> str | None:
    """The manifest digest from `docker push` output ("TAG: digest: sha256:... size: N"), for `tag` if given."""
    found = [(m["tag"], m["digest"]) for m in _DIGEST_LINE.finditer(output)]
    if tag is not None:
        found = [item for item in found if item[0] == tag] or found
    return found[-1][1] if found else None
