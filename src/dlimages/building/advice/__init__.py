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

from dlimages.building.advice.base import MIRROR_BASES, base_failure, bases_unavailable, offline_cell
from dlimages.building.advice.diagnosis import Attempt, Diagnosis, Remedies
from dlimages.building.advice.machine import machine_failure
from dlimages.building.advice.network import network_events, network_failure
from dlimages.building.advice.outright import (
    LOCK_FAILURES,
    OTHER_FAILURES,
    known_failure,
    pip_check_failure,
    unknown_failure,
    with_hash_host,
    with_index,
)
from dlimages.building.advice.reading import failed_step

__all__ = ["MIRROR_BASES", "Attempt", "Diagnosis", "Remedies", "bases_unavailable", "diagnose", "offline_cell"]


def diagnose(output: Sequence[str], attempt: Attempt | None = None, remedies: Remedies | None = None) -> Diagnosis:
    """What the output of a failed build says went wrong, and the way out."""
    attempt, remedies = attempt or Attempt(), remedies or Remedies()
    if (found := machine_failure(output)) is not None:
        return found
    step = failed_step(output)
    if (found := base_failure(step, attempt, remedies)) is not None:
        return found
    if (known := known_failure(step.text, LOCK_FAILURES)) is not None:
        return with_hash_host(known, step)
    # Before the network: a step that retried a download and then installed everything can still fail its check.
    if (found := pip_check_failure(step, attempt)) is not None:
        return found
    if events := network_events(step, attempt):
        return network_failure(events, attempt, remedies)
    if (known := known_failure(step.text, OTHER_FAILURES)) is not None:
        return with_index(known, step)
    return unknown_failure(step)
