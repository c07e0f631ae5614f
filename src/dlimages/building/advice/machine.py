"""The machine the build ran on, not the Dockerfile: no Docker engine (or no access to it, or no CLI), a full disk,
a layer the engine lost. These read the whole output: such a failure need not name a step."""

from __future__ import annotations

import re
from collections.abc import Sequence

from dlimages.building.advice.diagnosis import Diagnosis
from dlimages.building.advice.reading import evidence_of
from dlimages.core import usage
from dlimages.core.usage import ENGINE_SCRIPT


def machine_failure(output: Sequence[str]) -> Diagnosis | None:
    """No engine, a full disk or a lost layer, whatever step the output names; None when it is none of these."""
    return next((found for finder in (_engine, _disk, _lost_layer) if (found := finder(output)) is not None), None)


def _engine(output: Sequence[str]) -> Diagnosis | None:
    text = "\n".join(output)
    if "cannot connect to the docker daemon" in text.lower():
        return Diagnosis(
            "engine",
            "Docker engine not reachable",
            f"The Docker engine is not reachable: start dockerd (on Debian 12, `bash {ENGINE_SCRIPT}` installs and "
            f"starts one; `{usage.BUILD}` does that itself unless --no-engine-setup), then rerun. Nothing was built.",
            evidence=evidence_of(output, "cannot connect to the docker daemon"),
        )
    if "permission denied while trying to connect to the docker daemon" in text.lower():
        return Diagnosis(
            "engine",
            "no access to the Docker engine",
            "This user may not use the Docker engine's socket: add it to the `docker` group (then log in again) or "
            "build as root. Nothing was built.",
            evidence=evidence_of(output, "permission denied while trying to connect"),
        )
    if re.search(r"^cannot run docker\b", text, re.MULTILINE):
        return Diagnosis(
            "engine",
            "docker CLI not installed",
            f"The docker CLI is not installed: on Debian 12, `bash {ENGINE_SCRIPT}` installs the engine, the CLI and "
            "buildx. Nothing was built.",
            evidence=evidence_of(output, "cannot run docker"),
        )
    return None


def _disk(output: Sequence[str]) -> Diagnosis | None:
    evidence = evidence_of(output, "no space left on device")
    if evidence is None:
        return None
    return Diagnosis(
        "disk",
        "disk full",
        f"The disk is full: `{usage.DISK}` shows what the engine holds on its data root and the engine's own commands "
        "that give space back (`docker image prune`, `docker builder prune`); then rerun.",
        evidence=evidence,
    )


_LOST_LAYER = re.compile(r"failed to prepare sha256:[0-9a-f]+ as \S+: open \S*/\.tmp-committed\d*: no such file")


def _lost_layer(output: Sequence[str]) -> Diagnosis | None:
    """The engine's builder still maps a layer to an overlay2 folder that is gone (a removed image or a deleted
    folder): only a restart of dockerd makes it read the layer store again (moby/buildkit#5469; seen here after
    `docker image rm` of a cell and a rebuild that made the same layers, 2026-11-30)."""
    if not any(_LOST_LAYER.search(line) for line in output):
        return None
    return Diagnosis(
        "engine",
        "engine lost a layer",
        "The engine's builder holds a layer whose folder is gone (moby/buildkit#5469), so every build on that layer "
        "fails the same way until dockerd restarts: `systemctl restart docker`, or, for the engine "
        f"`{ENGINE_SCRIPT}` started, `pkill dockerd` and then `bash {ENGINE_SCRIPT}`; then rerun. Images and the build "
        "cache are kept.",
        evidence=evidence_of(output, ".tmp-committed"),
    )
