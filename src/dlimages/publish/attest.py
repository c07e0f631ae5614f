"""What a pushed image holds and how it was made, as the two documents cosign attaches to its digest: a CycloneDX
SBOM and a SLSA v1 provenance; and whether an attached SBOM still describes an image.

Pure: the facts come in (read from the image and the repository by signing.py), bytes go out. The same facts give
the same bytes: no clock, no random serial number, every list sorted, so two pushes of one commit attach the same
documents. The registry a push went to is in neither: the attestation's subject (its digest) binds them to the image.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from packaging.utils import canonicalize_name

SBOM_TYPE = "cyclonedx"  # `cosign attest --type`: CycloneDX's predicate type
PROVENANCE_TYPE = "slsaprovenance1"  # https://slsa.dev/provenance/v1
BUILD_TYPE = "urn:dlimages:build:cell:v1"  # a cell's Dockerfile under images/, built by `invoke build`
DPKG_STATUS = "/var/lib/dpkg/status"
OS_RELEASE = "/etc/os-release"
PYTHON_LOCK = "/opt/venv/requirements.lock"
IMAGE_FILES = (DPKG_STATUS, OS_RELEASE, PYTHON_LOCK)
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"  # what the SBOM is made from and checked against
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class ImageFacts:
    """What signing.py read from one image (its config and files) and from the repository at the image's commit."""

    labels: Mapping[str, str]
    created: str  # the image's `Created`: SOURCE_DATE_EPOCH, as BuildKit stamps it
    files: Mapping[str, str | None]  # IMAGE_FILES -> text (None: not in the image)
    locks: Mapping[str, str] = field(default_factory=dict)  # repository path of each lock the build used -> sha256
    builder: Mapping[str, str] = field(default_factory=dict)  # "id", and tool -> version (docker, buildx)


def python_packages(lock: str | None) -> dict[str, tuple[str, tuple[str, ...]]]:
    """A requirements lock's pins: normalised name -> (version, its sha256 hashes)."""
    packages: dict[str, tuple[str, tuple[str, ...]]] = {}
    name = None
    for line in (lock or "").splitlines():
        if match := _PIN.match(line):
            name = canonicalize_name(match.group(1))
            packages[name] = (match.group(2), ())
        elif name and (hashed := _HASH.search(line)):
            version, hashes = packages[name]
            packages[name] = (version, (*hashes, hashed.group(1)))
    return packages


def debian_packages(status: str | None) -> dict[str, tuple[str, str]]:
    """dpkg's status file: each installed package's name -> (version, architecture). Packages only remembered
    (removed, their configuration left) are not installed."""
    packages: dict[str, tuple[str, str]] = {}
    for paragraph in (status or "").split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", paragraph, re.M))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            packages[fields["Package"]] = (fields.get("Version", ""), fields.get("Architecture", ""))
    return packages


def distribution(os_release: str | None) -> tuple[str, str] | None:
    """os-release's ID and VERSION_ID (("debian", "12"), ("ubuntu", "24.04")), as the package URL of a Debian
    package names them; None when it gives no ID or no VERSION_ID."""
    fields = dict(re.findall(r'^([A-Z_]+)=["\']?([^"\'\n]*)["\']?$', os_release or "", re.M))
    found = fields.get("ID", ""), fields.get("VERSION_ID", "")
    return found if all(found) else None


def _encoded(text: str) -> str:
    return quote(text, safe=".-_~")


def sbom(facts: ImageFacts) -> bytes:
    """CycloneDX 1.6 JSON: the image (its title and version labels, every io.dlimages.* label as a property, the
    CUDA libraries among them: from the framework's nvidia-* wheels or the base's cuda-* packages, both listed), its
    base by digest, every installed Debian package (`pkg:deb`) and every locked Python package (`pkg:pypi`, with
    the lock's hashes)."""
    labels = facts.labels
    distro, version = distribution(facts.files.get(OS_RELEASE)) or ("linux", "")
    components: list[dict[str, Any]] = []
    for name, (deb_version, arch) in debian_packages(facts.files.get(DPKG_STATUS)).items():
        purl = f"pkg:deb/{distro}/{_encoded(name)}@{_encoded(deb_version)}?arch={arch}&distro={distro}-{version}"
        components.append({"type": "library", "name": name, "version": deb_version, "purl": purl, "bom-ref": purl})
    for name, (py_version, hashes) in python_packages(facts.files.get(PYTHON_LOCK)).items():
        purl = f"pkg:pypi/{name}@{_encoded(py_version)}"
        entry: dict[str, Any] = {"type": "library", "name": name, "version": py_version, "purl": purl, "bom-ref": purl}
        entry["hashes"] = [{"alg": "SHA-256", "content": digest} for digest in sorted(hashes)]
        components.append(entry)
    base_name, base_digest = labels.get("org.opencontainers.image.base.name", ""), _base_digest(labels)
    if base_name:
        base: dict[str, Any] = {"type": "container", "name": base_name, "bom-ref": f"base:{base_name}"}
        if base_digest:
            base |= {"version": base_digest, "hashes": [{"alg": "SHA-256", "content": base_digest.split(":")[1]}]}
        components.append(base)
    prefix = "io.dlimages."
    properties = [
        {"name": f"dlimages:{key.removeprefix(prefix)}", "value": value}
        for key, value in sorted(labels.items())
        if key.startswith(prefix)
    ]
    document = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "version": 1,
        "metadata": {
            "component": {
                "type": "container",
                "name": labels.get("org.opencontainers.image.title", "image"),
                "version": labels.get("org.opencontainers.image.version", ""),
                "bom-ref": "image",
            },
            "tools": {"components": [{"type": "application", "name": "dlimages"}]},
            "properties": properties,
        },
        "components": sorted(components, key=lambda c: str(c["bom-ref"])),
    }
    return _canonical(document)


def provenance(facts: ImageFacts) -> bytes:
    """A SLSA v1 provenance predicate: what was built (the cell, its Dockerfile, the mirror profile), from what (the
    commit, the base by digest, each lock file's SHA256) and with what (the build arguments, SOURCE_DATE_EPOCH among
    them; the engine and buildx versions). `cosign attest` wraps it in a statement whose subject is the digest."""
    labels = facts.labels
    cell, framework = labels.get("io.dlimages.cell", ""), labels.get("io.dlimages.framework", "")
    revision = labels.get("org.opencontainers.image.revision", "unknown")
    source = labels.get("org.opencontainers.image.source", "")
    dependencies: list[dict[str, Any]] = [
        {"name": "source", "uri": f"git+{source}" if source else "git", "digest": {"gitCommit": revision}},
    ]
    base_name, base_digest = labels.get("org.opencontainers.image.base.name", ""), _base_digest(labels)
    if base_name:
        base: dict[str, Any] = {"name": "base", "uri": f"docker://{base_name}"}
        if base_digest:
            base["digest"] = {"sha256": base_digest.split(":")[1]}
        dependencies.append(base)
    dependencies += [{"name": path, "digest": {"sha256": digest}} for path, digest in sorted(facts.locks.items())]
    builder = dict(facts.builder)
    document = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "cell": cell,
                "dockerfile": f"images/{framework}/{cell}/Dockerfile" if cell else "",
                "mirrorProfile": labels.get("io.dlimages.mirror-profile", ""),
            },
            "internalParameters": {
                "BASE_DIGEST": base_digest,
                "BASE_NAME": base_name,
                "REVISION": revision,
                "SOURCE_DATE_EPOCH": str(epoch_of(facts.created)),
            },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {"builder": {"id": builder.pop("id", BUILD_TYPE), "version": builder}},
    }
    return _canonical(document)


def epoch_of(created: str) -> int:
    """Seconds since 1970 of an image's `Created` (RFC 3339, perhaps with nanoseconds); 0 when it cannot be read."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)", created.strip())
    if not match:
        return 0
    zone = "+00:00" if match.group(2) == "Z" else match.group(2)
    moment = datetime.fromisoformat(match.group(1) + zone)
    return int(moment.astimezone(timezone.utc).timestamp())


def _base_digest(labels: Mapping[str, str]) -> str:
    digest = labels.get(BASE_DIGEST_LABEL, "")
    return digest if re.fullmatch(r"sha256:[0-9a-f]{64}", digest) else ""


def _canonical(document: object) -> bytes:
    return (json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def sbom_mismatch(document: Mapping[str, Any], files: Mapping[str, str | None]) -> list[str]:
    """Where an SBOM (parsed) and the image's files disagree: its pkg:pypi components against the image's own
    requirements lock, its pkg:deb components against the image's dpkg status. Empty when they agree."""
    listed: dict[str, dict[str, str]] = {"deb": {}, "pypi": {}}
    for component in document.get("components") or ():
        kind = str(component.get("purl", "")).removeprefix("pkg:").split("/", 1)[0]
        if kind in listed:
            listed[kind][str(component.get("name"))] = str(component.get("version"))
    have = {
        "deb": {name: version for name, (version, _) in debian_packages(files.get(DPKG_STATUS)).items()},
        "pypi": {name: version for name, (version, _) in python_packages(files.get(PYTHON_LOCK)).items()},
    }
    where = {"deb": f"Debian packages (the image's {DPKG_STATUS})", "pypi": f"Python packages ({PYTHON_LOCK})"}
    problems = []
    for kind, image in have.items():
        sbom_side = listed[kind]
        added = _pins(image, set(image) - set(sbom_side))
        gone = _pins(sbom_side, set(sbom_side) - set(image))
        moved = [
            f"{n} {sbom_side[n]} -> {image[n]}" for n in sorted(set(image) & set(sbom_side)) if image[n] != sbom_side[n]
        ]
        for what, names in (("in the image, not in the SBOM", added), ("in the SBOM, not in the image", gone)):
            if names:
                problems.append(f"{where[kind]} {what}: {_some(names)}")
        if moved:
            problems.append(f"{where[kind]} at another version than the SBOM says: {_some(moved)}")
    return problems


def _pins(packages: Mapping[str, str], names: Iterable[str]) -> list[str]:
    return [f"{name}={packages[name]}" for name in sorted(names)]


def _some(items: list[str], shown: int = 5) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def attestation_problems(
    sboms: Iterable[object], provenances: Iterable[object], files: Mapping[str, str | None], labels: Mapping[str, str]
) -> list[str]:
    """Why the signed SBOMs and provenances do not describe the image whose files and labels are given (empty:
    they do). An SBOM must list exactly the components this image's files give (`sbom`): every name, version,
    purl and hash, each once; a provenance must name the image's commit and, where the image records one, its
    base by name and digest. A document of another shape is a problem, never a crash."""
    expected = _components(json.loads(sbom(ImageFacts(labels, "", files))))
    problems: list[str] = []
    for document in sboms:
        try:
            problems += sbom_mismatch(document, files) or _differ(_components(document), expected)  # type: ignore[arg-type]
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            problems.append(f"an SBOM that is no CycloneDX document of ours ({type(error).__name__}: {error})")
    revision = labels.get("org.opencontainers.image.revision", "unknown")
    base = labels.get("org.opencontainers.image.base.name", ""), _base_digest(labels)
    for document in provenances:
        try:
            definition = document["buildDefinition"]  # type: ignore[index]
            dependencies = {d["name"]: d for d in definition["resolvedDependencies"]}
            internal = definition["internalParameters"]
        except (KeyError, TypeError) as error:
            problems.append(f"a provenance that is no SLSA v1 document of ours ({type(error).__name__}: {error})")
            continue
        commit = dependencies.get("source", {}).get("digest", {}).get("gitCommit")
        if commit != revision:
            problems.append(f"the provenance names commit {commit}, the image's label {revision}")
        said = internal.get("BASE_NAME", ""), internal.get("BASE_DIGEST", "")
        recorded = dependencies.get("base", {}).get("digest", {}).get("sha256")
        if said != base or (base[1] and recorded != base[1].split(":")[1]):
            problems.append(
                f"the provenance names the base {'@'.join(filter(None, said))}, the image's labels {'@'.join(base)}"
            )
    return problems


def _components(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    components = document["components"]
    if not isinstance(components, list) or not all(isinstance(c, dict) for c in components):
        raise TypeError("its components are not a list of objects")
    return components


def _differ(signed: list[dict[str, Any]], expected: list[dict[str, Any]]) -> list[str]:
    """How the SBOM's components differ from those the image's files give: each by its bom-ref, compared whole."""
    problems = []
    refs = [str(c.get("bom-ref")) for c in signed]
    if twice := sorted({ref for ref in refs if refs.count(ref) > 1}):
        problems.append(f"components listed twice: {_some(twice)}")
    have, want = {str(c.get("bom-ref")): c for c in signed}, {str(c["bom-ref"]): c for c in expected}
    if extra := sorted(set(have) - set(want)):
        problems.append(f"components this image's files do not give: {_some(extra)}")
    if missing := sorted(set(want) - set(have)):
        problems.append(f"components missing: {_some(missing)}")
    if changed := sorted(ref for ref in set(have) & set(want) if have[ref] != want[ref]):
        problems.append(f"components whose purl, version or hashes differ: {_some(changed)}")
    return problems
