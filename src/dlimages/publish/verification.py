"""`invoke verify`: an image's signature and attestations checked (cosign, through the Runner) before it runs.

`verify` resolves a tag to the digest it names once, checks the signature and both attestations against a key or an
identity (signing.Trust), and checks that the SBOM lists exactly the image's own Python lock and dpkg status, read
from a container that is created and never started (signing.read_files).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlimages.core.references import names_registry, registry_of, split_tag
from dlimages.core.runner import DEFAULT, Result, Runner
from dlimages.core.watch import Wait
from dlimages.publish import attest
from dlimages.publish.daemonregistry import insecure_registry
from dlimages.publish.signing import SigningError, Trust, cosign, cosign_reason, inspect_image, read_files

PULL_TIMEOUT_S = 3600.0
_DIGEST_LINE = re.compile(r"^Digest: (sha256:[0-9a-f]{64})$", re.M)


@dataclass(frozen=True)
class Verified:
    """An image whose signature and attestations verified: its REPOSITORY@DIGEST and what was checked."""

    ref: str
    lines: tuple[str, ...] = field(default_factory=tuple)
    labels: Mapping[str, str] = field(default_factory=dict)  # the image's own: what its name is checked against


def verify(image: str, trust: Trust, runner: Runner = DEFAULT) -> Verified:
    """Resolve `image` to the digest its tag names now (pulling it), then check, against `trust`: the signature,
    the SBOM and provenance attestations, the SBOM against the image's files and the provenance's commit and base
    against the image's labels. Raises SigningError with the first reason it does not verify."""
    ref = resolve(image, runner)
    http = ["--allow-http-registry"] if insecure_registry(ref, runner) else []  # where dockerd skips TLS
    moved = "" if "@" in image else f" ({image} names this digest now: the tag was moved, or the image never signed)"
    signed = cosign(runner, ["verify", *trust.flags(), *http, ref], "", check=False)
    if not signed.ok:
        raise SigningError(
            f"{ref}: {_signature_problem(signed, trust)}{moved if 'no signatures' in signed.err else ''}"
        )
    repository = split_tag(ref.split("@", 1)[0])[0]
    signed_as = _signed_repositories(signed.out)
    if not any(_same_repository(repository, other) for other in signed_as):
        said = ", ".join(sorted(signed_as)) or "no repository"
        raise SigningError(f"{ref}: signed as {said}, not as {repository}: a signature copied from elsewhere")
    predicates = {}
    for kind in (attest.SBOM_TYPE, attest.PROVENANCE_TYPE):
        found = cosign(runner, ["verify-attestation", *trust.flags(), *http, "--type", kind, ref], "", check=False)
        if not found.ok:
            raise SigningError(f"{ref}: no {kind} attestation signed by {trust.describe()}: {cosign_reason(found)}")
        predicates[kind] = _predicates(found.out, ref)
    files = read_files(ref, runner)
    labels = dict((inspect_image(ref, runner).get("Config") or {}).get("Labels") or {})
    problems = attest.attestation_problems(
        predicates[attest.SBOM_TYPE], predicates[attest.PROVENANCE_TYPE], files, labels
    )
    if problems:
        raise SigningError(f"{ref}: the attestations do not describe this image: " + "; ".join(problems))
    revision = labels.get("org.opencontainers.image.revision", "unknown")
    pythons = len(attest.python_packages(files.get(attest.PYTHON_LOCK)))  # the SBOM's components, checked above
    debians = len(attest.debian_packages(files.get(attest.DPKG_STATUS)))
    base_parts = (labels.get("org.opencontainers.image.base.name", ""), labels.get(attest.BASE_DIGEST_LABEL, ""))
    base = "@".join(part for part in base_parts if part) or "none recorded"
    return Verified(
        ref,
        (
            f"signature: {trust.describe()}, as {repository}",
            f"SBOM (CycloneDX): {pythons} Python packages = {attest.PYTHON_LOCK}, "
            f"{debians} Debian packages = {attest.DPKG_STATUS}",
            f"provenance (SLSA v1): commit {revision}, base {base}",
        ),
        labels,
    )


def resolve(image: str, runner: Runner = DEFAULT) -> str:
    """REPOSITORY@DIGEST for `image`: pulled once (a digest ref stays as it is), so the digest is the very content
    the engine now holds; SigningError when it cannot be pulled."""
    pulled = runner.watched(["docker", "pull", image], Wait(f"pulling {image}", registry_of(image), PULL_TIMEOUT_S))
    if not pulled.ok:
        raise SigningError(f"cannot pull {image}: {pulled.last_line}")
    if "@" in image:
        return image
    digest = _DIGEST_LINE.search(pulled.out)
    if digest is None:
        raise SigningError(f"`docker pull {image}` named no digest: {pulled.last_line}")
    return f"{split_tag(image)[0]}@{digest.group(1)}"


def _predicates(out: str, ref: str) -> list[dict[str, Any]]:
    """The predicates of the DSSE envelopes `cosign verify-attestation` prints, one JSON object per line."""
    found = [
        json.loads(base64.b64decode(json.loads(line)["payload"]))["predicate"]
        for line in out.splitlines()
        if line.strip().startswith("{")
    ]
    if not found:
        raise SigningError(f"{ref}: cosign verified an attestation but printed none")
    return found


def _signature_problem(done: Result, trust: Trust) -> str:
    text = done.err + done.out
    if "no signatures found" in text:
        return "not signed"
    if "no matching signatures" in text or "invalid signature" in text or "none of the expected identities" in text:
        return f"signed, but not by {trust.describe()} (cosign: {cosign_reason(done)})"
    return f"the signature does not verify: {cosign_reason(done)}"


def _signed_repositories(out: str) -> set[str]:
    """The repositories the signatures `cosign verify` printed (and checked) were made for: each signed payload's
    critical.identity.docker-reference."""
    found = set()
    for line in out.splitlines():
        try:
            payloads = json.loads(line) if line.lstrip().startswith("[") else []
            found |= {str(p["critical"]["identity"]["docker-reference"]) for p in payloads}
        except (ValueError, KeyError, TypeError):
            continue
    return found


def _same_repository(asked: str, signed: str) -> bool:
    """Whether `asked` is the repository `signed` names, on its registry or on another one that mirrors it (under
    the same path, perhaps below a prefix of its own)."""
    path = signed.split("/", 1)[1] if names_registry(signed) else signed
    return asked == signed or asked.split("/", 1)[-1] == path or asked.endswith(f"/{path}")
