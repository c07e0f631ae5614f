"""What a published image is, for the build report: ID, size, labels, pip and dpkg packages, where it was pushed.

`image_manifest` asks the engine (through the runner); `build_report` is pure; `write_report` writes atomically.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.core.runner import DEFAULT, Result, Runner
from dlimages.publish.daemonregistry import INSPECT_TIMEOUT_S
from dlimages.publish.push import PushError
from dlimages.publish.pushplan import PushResult
from dlimages.publish.pushrun import image_layers

MANIFEST_TIMEOUT_S = 300.0
VENV_PYTHON = "/opt/venv/bin/python"
BASE_LABEL = "org.opencontainers.image.base"
RUN_LOCAL = ("docker", "run", "--rm", "--pull", "never")  # the image pushed is local: never pulled from elsewhere
NO_ENTRYPOINT = 127  # `docker run`: the entrypoint is not in the image


def build_report(
    results: Iterable[PushResult],
    manifests: Mapping[str, Mapping[str, Any]],
    cells: Mapping[str, str] | None = None,
    stored: Mapping[str, Sequence[Mapping[str, Any]] | None] | None = None,
) -> list[dict[str, Any]]:
    """One entry per local ref: the cell it was built from (from the build ledger; None for an image built
    elsewhere), the base it was built FROM (its org.opencontainers.image.base.* labels: registry, repository and
    tag, and digest), its manifest (`image_manifest`) and where it was pushed, in a stable order; with `stored`
    (`stored_layers` by remote ref), each push's layers as the registry stores them and their compressed total."""
    pushed: dict[str, list[dict[str, object]]] = {}
    for result in results:
        entry = result.as_json()
        layers = (stored or {}).get(result.remote_ref)
        if layers is not None:
            entry |= {
                "layers": [dict(layer) for layer in layers],
                "compressed_size": sum(each["size"] for each in layers),
            }
        pushed.setdefault(result.ref, []).append(entry)
    refs = sorted(set(pushed) | set(manifests))
    return [
        {
            "ref": ref,
            "cell": (cells or {}).get(ref),
            "base": _base(manifests.get(ref, {})),
            "image": dict(manifests.get(ref, {})),
            "pushed": sorted(pushed.get(ref, []), key=lambda item: str(item["remote_ref"])),
        }
        for ref in refs
    ]


def stored_layers(repository_digest: str, insecure: bool, runner: Runner = DEFAULT) -> list[dict[str, Any]] | None:
    """The layers a registry stores for REPOSITORY@DIGEST: digest, media type (gzip or zstd) and compressed size,
    from `docker manifest inspect -v`; None when it cannot be read (the report then says nothing of them)."""
    argv = ["docker", "manifest", "inspect", "-v", *(["--insecure"] if insecure else []), repository_digest]
    done = runner(argv, timeout=INSPECT_TIMEOUT_S)
    try:
        manifest = json.loads(base64.b64decode(json.loads(done.out)["Raw"], validate=True))
        return [
            {"digest": str(layer["digest"]), "media_type": str(layer["mediaType"]), "size": int(layer["size"])}
            for layer in manifest["layers"]
        ]
    except (ValueError, TypeError, KeyError):
        return None


def _base(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    labels = manifest.get("labels") or {}
    return {
        "name": labels.get(f"{BASE_LABEL}.name"),
        "digest": labels.get(f"{BASE_LABEL}.digest") or None,  # empty: a base made on the build machine
    }


def image_manifest(image_ref: str, runner: Runner = DEFAULT, *, python: str | None = VENV_PYTHON) -> dict[str, Any]:
    """What a published image is: ID, size in bytes, labels, pip packages (via `python`) and installed dpkg packages.

    `python=None` records "pip": None for images without a Python environment. Raises PushError when the
    image cannot be inspected or a listing fails.
    """
    done = runner(["docker", "image", "inspect", image_ref], timeout=INSPECT_TIMEOUT_S)
    if not done.ok:
        raise PushError(f"cannot inspect {image_ref}: {done.last_line}")
    info = json.loads(done.out)[0]
    manifest: dict[str, Any] = {
        "ref": image_ref,
        "id": info["Id"],
        "size": int(info["Size"]),
        "repo_digests": sorted(info.get("RepoDigests") or []),
        "labels": dict(sorted(((info.get("Config") or {}).get("Labels") or {}).items())),
        "layers": _layers(runner, info),
        "pip": None,
    }
    if python is not None:
        argv = [*RUN_LOCAL, "--entrypoint", python, image_ref, "-m", "pip", "list", "--format=json"]
        listed = runner(argv, timeout=MANIFEST_TIMEOUT_S)
        if listed.code != NO_ENTRYPOINT or "no such file" not in listed.err:  # else no venv (a base): "pip": None
            pip = json.loads(_checked(runner, argv, image_ref, "pip list", listed))
            manifest["pip"] = {item["name"]: item["version"] for item in sorted(pip, key=lambda i: i["name"].lower())}
    return _dpkg(manifest, runner, image_ref)


def _layers(runner: Runner, info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each layer's diff ID and uncompressed size (None where `docker history` cannot tell), oldest first."""
    diff_ids = list((info.get("RootFS") or {}).get("Layers") or [])
    sizes = {layer.id: layer.size for layer in image_layers(runner, info["Id"], diff_ids)}
    return [{"diff_id": diff_id, "size": sizes.get(diff_id.removeprefix("sha256:")[:12])} for diff_id in diff_ids]


def _dpkg(manifest: dict[str, Any], runner: Runner, image_ref: str) -> dict[str, Any]:
    # The status column keeps out packages that are only remembered (removed, config files left).
    status_format = "${db:Status-Abbrev}\t${Package}=${Version}\n"
    argv = [*RUN_LOCAL, "--entrypoint", "dpkg-query", image_ref, "-W", "-f", status_format]
    dpkg = _checked(runner, argv, image_ref, "dpkg-query")
    installed = [line.split("\t", 1)[1] for line in dpkg.splitlines() if line.startswith("ii")]
    manifest["dpkg"] = dict(sorted(entry.split("=", 1) for entry in installed))
    return manifest


def _checked(runner: Runner, argv: list[str], image_ref: str, what: str, done: Result | None = None) -> str:
    done = done or runner(argv, timeout=MANIFEST_TIMEOUT_S)
    if not done.ok:
        raise PushError(f"{what} in {image_ref} failed: {done.last_line}")
    return done.out


def write_report(path: Path, entries: object) -> None:
    """Write `entries` as JSON with sorted keys, atomically: readers see the old report or the new one, never half."""
    write_atomic(path, json.dumps(entries, sort_keys=True, indent=2) + "\n")


def report_target(root: Path, report: str) -> Path:
    """Where --report writes, checked before anything is pushed; InputError for an empty name or a folder."""
    path = root / report
    if not report or path.is_dir():
        raise InputError([Problem("--report", f"{report!r} is not a file name", "a JSON file to write")])
    return path
