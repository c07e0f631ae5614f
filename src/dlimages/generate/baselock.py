"""`invoke bases --lock`: each pulled base's tag resolved to the digest it names now (core/registry), into the bases
lock (dlimages.artifacts.baseslock)."""

from __future__ import annotations

from collections.abc import Iterable

from dlimages.artifacts.baseslock import BaseLock
from dlimages.core.registry import Resolved, resolve_digest
from dlimages.core.runner import Runner


def refresh(
    lock: BaseLock, refs: Iterable[str], runner: Runner, *, tls_verify: bool = True
) -> tuple[BaseLock, list[Resolved]]:
    """A new lock with each of `refs` that resolved set to its digest now; the others keep what they had (or stay
    unrecorded): never dropped, never guessed. Returns every result in order, for the caller to report."""
    results = [resolve_digest(ref, runner, tls_verify=tls_verify) for ref in dict.fromkeys(refs)]
    digests = dict(lock.digests)
    for result in results:
        if result.digest is not None:
            digests[result.ref] = result.digest
    return BaseLock(digests), results
