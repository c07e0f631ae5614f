"""Why a build failed and the way out: reads a failed build's output (BuildKit's plain progress, with the pip and apt
lines of its RUN steps) and names what failed, the host that failed, and what to run instead.

Pure: output lines, the build that failed (`Attempt`) and what matrix.yaml offers (`Remedies`) in, a `Diagnosis`
out. Nothing here asks Docker or the network, so the advice works when the engine itself is what is missing; only
`reach`, which `invoke matrix --here` runs, asks whether the sources a build needs answer, never during advice.

One module per kind of cause: `machine` (the engine, the disk), `base` (the base image), `network` (pip and apt
could not reach a host), `outright` (what pip or the build says in so many words); `reading` reads the output for
all of them. `diagnose` below tries them in the order that tells them apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlimages.building.advice.base import (
    MIRROR_BASES,
    Route,
    base_failure,
    base_not_pullable,
    bases_unavailable,
    offline_cell,
)
from dlimages.building.advice.diagnosis import Attempt, Diagnosis, Kind, Remedies
from dlimages.building.advice.machine import machine_failure
from dlimages.building.advice.network import PYPI_INDEX, network_events, network_failure
from dlimages.building.advice.outright import (
    LOCK_FAILURES,
    MAX_CONFLICTS_SHOWN,
    OTHER_FAILURES,
    known_failure,
    pip_check_failure,
    unknown_failure,
    with_hash_host,
    with_index,
)
from dlimages.building.advice.reading import EVIDENCE_CHARS, STEP_CHARS, Trouble, failed_step

__all__ = [
    "EVIDENCE_CHARS",
    "MAX_CONFLICTS_SHOWN",
    "MIRROR_BASES",
    "PYPI_INDEX",
    "STEP_CHARS",
    "Attempt",
    "Diagnosis",
    "Kind",
    "Remedies",
    "Route",
    "Trouble",
    "base_not_pullable",
    "bases_unavailable",
    "diagnose",
    "offline_cell",
]


def diagnose(output: Sequence[str], attempt: Attempt | None = None, remedies: Remedies | None = None) -> Diagnosis:
    """What the output of a failed build says went wrong, and the way out."""
    attempt = attempt or Attempt()
    remedies = remedies or Remedies()
    found = machine_failure(output)
    if found is not None:
        return found
    step = failed_step(output)
    base = base_failure(step, attempt, remedies)
    if base is not None:
        return base
    known = known_failure(step.text, LOCK_FAILURES)
    if known is not None:
        return with_hash_host(known, step)
    # Before the network: a step that retried a download and then installed everything can still fail its check.
    conflicts = pip_check_failure(step, attempt)
    if conflicts is not None:
        return conflicts
    events = network_events(step, attempt)
    if events:
        return network_failure(events, attempt, remedies)
    known = known_failure(step.text, OTHER_FAILURES)
    if known is not None:
        return with_index(known, step)
    return unknown_failure(step)
