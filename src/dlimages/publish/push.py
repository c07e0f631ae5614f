"""Push built images to registries and prove each push by pulling its digest back.

What to push and what docker's answers mean is decided in pushplan.py (pure); `push_image` runs every command through
a `Runner` (as pushrun.py's Settings say: retried, `docker push` streamed with its progress), so unit tests hand in a
fake docker and need no engine; interrupts.py handles signals and deadlines meanwhile.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from typing import TextIO

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import CONTAINERD
from dlimages.core.runner import DEFAULT, Runner
from dlimages.publish.daemonregistry import INSPECT_TIMEOUT_S
from dlimages.publish.interrupts import PushSignals
from dlimages.publish.pushplan import (
    MAX_RETRIES,
    RETRIES_ALLOWED,
    PushResult,
    PushTarget,
    parse_digest,
    parse_remote_tag,
    plan_push,
)
from dlimages.publish.pushrun import Outcome, Settings, Sleep
from dlimages.publish.scratch import Scratch, untag
from dlimages.publish.zstdpush import Archives

PUSH_TIMEOUT_S = 3600.0  # one try of a multi-GB image over a slow uplink; a hang beyond this counts as transient
# An engine problem is neither the registry's fault nor worth retrying.
_ENGINE = re.compile(r"cannot connect to the docker daemon|error during connect|docker daemon socket", re.I)
_NO_SUCH_MANIFEST = re.compile(r"^no such manifest: ", re.M)  # `docker manifest inspect`: the tag is not there
_GIVE_UP = ("auth", "transient", "unreachable")  # failures after which a registry's other refs are not tried


class PushError(Exception):
    """A push that could not be done or not be proven; the message says what to do, results say what happened."""

    def __init__(self, message: str, results: Sequence[PushResult] = ()) -> None:
        super().__init__(message)
        self.results = tuple(results)


class PushInterrupted(PushError):
    """SIGINT or SIGTERM stopped the push; the temporary tag is gone (or the message says why not)."""

    def __init__(self, message: str, signal_name: str, results: Sequence[PushResult] = ()) -> None:
        super().__init__(message, results)
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as shells report a command a signal stopped: 130 SIGINT, 143 SIGTERM."""
        return 128 + int(signal.Signals[self.signal_name])


class _Interrupted(Exception):
    """Raised out of one target's push once its temporary tag is cleaned up; push_image words the message."""

    def __init__(self, target: PushTarget, tag_note: str) -> None:
        super().__init__(tag_note)
        self.target = target
        self.tag_note = tag_note


def push_image(
    refs: Sequence[str],
    registries: Sequence[str],
    *,
    retries: int = 3,
    backoff: float = 2.0,
    runner: Runner = DEFAULT,
    sleep: Sleep = time.sleep,
    timeout: float = PUSH_TIMEOUT_S,
    moving: Collection[str] = (),
    force_overwrite: bool = False,
    names: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    archives: Archives | None = None,
    configs: Mapping[str, str] | None = None,
    stage: bool = False,
    scratch: Scratch | None = None,
) -> list[PushResult]:
    """Push every local ref to every registry and prove each push by pulling its digest back.

    A ref goes to REGISTRY/REF, or to REGISTRY/`names[REF]` where given (a build of a branch: tags.published_refs).
    Per (registry, ref): unless REF is in `moving` (a release tag or an alias, which move on purpose) or
    `force_overwrite` is given, the tag is immutable: `docker manifest inspect` reads what the registry serves
    under it, and a different image there refuses the push. Then `docker tag REF REGISTRY/REF`, `docker push`
    (a transient failure is tried again up to `retries` more times, sleeping backoff, 2*backoff, 4*backoff...;
    a refusal of credentials never is), then `docker pull REGISTRY/REPO@DIGEST` must give the local image ID.
    The registry-prefixed tag is removed afterwards if this call made it (kept, and reported, if REF was rebuilt
    meanwhile: it is then the pushed image's last tag), also when SIGINT or SIGTERM stops the push (which then
    raises PushInterrupted); local tags and images are never touched. Once a registry refuses the credentials or
    cannot be reached, its remaining refs are not tried.

    Each `docker push` shows its progress on `out` (stdout when None; pushprogress.py), and each try of it is
    stopped after `timeout` seconds (a hang is a transient failure).
    With `archives`, layers go compressed as it says (zstd; gzip from the containerd store) as `docker save`
    streams them, then copied by skopeo (zstdpush.py). `configs`: the config digest of local images by their ID, as
    their builds recorded it (artifacts.ledger), else `docker save` tells it on the containerd store.

    Returns the results when every push was verified; otherwise raises PushError whose message names each
    failure and what to do, with all results attached. Raises InputError for bad refs or registries, or
    refs that are not local images.
    """
    problems = []
    if not 0 <= retries <= MAX_RETRIES:
        problems.append(Problem("--retries", f"is {retries}", RETRIES_ALLOWED))
    if backoff < 0:
        problems.append(Problem("--backoff", f"is {backoff}", "0 or more seconds"))
    if problems:
        raise InputError(problems)
    targets = plan_push(refs, registries, names)
    signals = PushSignals()
    settings = Settings(runner, sleep, retries, backoff, timeout, signals, sys.stdout if out is None else out)
    settings.archives, settings.configs = archives, dict(configs or {})
    settings.stage, settings.scratch = stage and archives is not None, scratch
    results: list[PushResult] = []
    with signals.installed():
        try:
            local_ids = _local_ids(runner, list(dict.fromkeys(refs)))
            given_up: dict[str, str] = {}  # registry -> why the rest of its refs are not tried
            for target in targets:
                if target.registry in given_up:
                    results.append(target.result(given_up[target.registry]))
                    continue
                immutable = not force_overwrite and target.ref not in moving
                result, give_up = _push_one(target, local_ids[target.ref], settings, signals, immutable)
                if give_up and result.error:
                    given_up[target.registry] = result.error
                results.append(result)
                signals.check()
        except _Interrupted as stopped:
            raise _interrupted(signals.received, results, stopped, settings.stage) from None
        except KeyboardInterrupt:
            raise _interrupted(signals.received, results) from None

    failed = [result for result in results if not result.ok]
    if failed:
        lines = [f"{len(failed)} of {len(results)} pushes failed:"]
        lines += [f"- {error}" for error in dict.fromkeys(str(r.error) for r in failed)]
        raise PushError("\n".join(lines), results)
    return results


def _interrupted(
    signal_name: str | None, results: Sequence[PushResult], stopped: _Interrupted | None = None, staged: bool = False
) -> PushInterrupted:
    name = signal_name or "SIGINT"  # Ctrl-C where no handler of ours runs (another thread)
    done = sum(result.ok for result in results)
    if stopped is None:
        lines = [f"interrupted by {name}: no temporary tag is left and nothing local was changed."]
    else:
        target = stopped.target
        lines = [
            f"interrupted by {name} while pushing {target.ref} to {target.registry}: {stopped.tag_note}, and nothing "
            "else local was changed; "
            + (
                f"{target.remote_ref} was not tagged (a signed push tags it once signed)."
                if staged
                else f"{target.registry} has {target.remote_ref} only if its upload had finished."
            )
        ]
    lines.append(f"{done} {'push was' if done == 1 else 'pushes were'} finished and verified before that.")
    return PushInterrupted("\n".join(lines), name, results)


def _local_ids(runner: Runner, refs: list[str]) -> dict[str, str]:
    """The image ID of each local ref; InputError naming every ref that is not a local image."""
    ids: dict[str, str] = {}
    missing: list[Problem] = []
    for ref in refs:
        done = runner(["docker", "image", "inspect", "--format", "{{.Id}}", ref], timeout=INSPECT_TIMEOUT_S)
        if done.ok and done.out.strip():
            ids[ref] = done.out.strip()
            continue
        if _ENGINE.search(done.err or done.out) or done.hung or done.missing:
            raise PushError(f"the Docker engine is not reachable ({done.last_line}): is dockerd running?")
        missing.append(Problem(f"image '{ref}'", "is not a local image", f"a ref built by `{usage.BUILD}`"))
    if missing:
        raise InputError(missing)
    return ids


def _push_one(
    target: PushTarget, local_id: str, settings: Settings, signals: PushSignals, immutable: bool
) -> tuple[PushResult, bool]:
    """The result, and whether the registry's other refs are not worth trying (credentials refused, unreachable)."""
    runner, ref, remote, result = settings.runner, target.ref, target.remote_ref, target.result

    # skopeo pushes layouts, not local names: no temporary tag to make, nor one to adopt
    existing = runner.image_id(remote) if settings.archives is None else local_id
    if existing is not None and existing != local_id:
        return result(f"{remote} already tags another local image ({existing[:19]}); remove that tag first"), False
    if immutable:
        refused, give_up, attempts = _immutable_tag_problem(target, local_id, settings)
        if refused:
            return result(refused, attempts), give_up
    made_tag = existing is None
    try:
        if made_tag:
            if settings.scratch is not None:
                settings.scratch.note_tag(remote, ref, local_id)
            done = runner(["docker", "tag", ref, remote], timeout=INSPECT_TIMEOUT_S)
            if not done.ok:
                return result(f"`docker tag {ref} {remote}` failed: {done.last_line}"), False
        pushed, give_up = _push_tagged(target, local_id, settings)
    except KeyboardInterrupt:
        with signals.cleanup():
            left = untag(runner, ref, remote, local_id) if made_tag else None
        kept = "no local tag was made" if settings.archives is not None else f"{remote} was tagged before: kept"
        note = left or (f"the temporary tag {remote} was removed" if made_tag else kept)
        raise _Interrupted(target, note) from None
    with signals.cleanup():
        left = untag(runner, ref, remote, local_id) if made_tag else None
    if left:
        pushed = dataclasses.replace(pushed, error=f"{pushed.error}; {left}" if pushed.error else left)
    return pushed, give_up


def _immutable_tag_problem(target: PushTarget, local_id: str, settings: Settings) -> tuple[str | None, bool, int]:
    """Why the registry's copy of this immutable tag forbids the push (None: absent, or the very same image),
    whether the registry's other refs are not worth trying, and how many tries reading the registry took when it
    failed (a registry that refuses the credentials or is down counts as the push's attempts)."""
    looked = settings.manifest(target.registry, target.remote_ref)
    if not looked.ok:
        if _NO_SUCH_MANIFEST.search(looked.last.err or looked.last.out):
            return None, False, 0
        if looked.kind in _GIVE_UP:
            return _push_message(target, looked), True, looked.attempts
        unknown = f"cannot tell which image {target.registry} serves under the immutable tag {target.tag} "
        unknown += f"({looked.last.last_line})"
    elif (remote := parse_remote_tag(looked.last.out)) is None:
        unknown = f"cannot read what {target.registry} serves under the immutable tag {target.tag} (unexpected "
        unknown += "output of `docker manifest inspect`)"
    elif remote.image_id == settings.config_of(target.ref, local_id):
        return None, False, 0
    else:
        refused = (
            f"{target.remote_ref} is an immutable tag and {target.registry} already has another image under it: "
            f"the registry serves {remote.describe()}, {target.ref} is image {local_id}; nothing was pushed. "
            "Release it under a new tag, or give --force-overwrite to replace the registry's image"
        )
        return refused, False, 0
    return f"{unknown}, so {target.ref} was not pushed: --force-overwrite pushes without looking", False, 0


def _push_tagged(target: PushTarget, local_id: str, settings: Settings) -> tuple[PushResult, bool]:
    registry, ref, remote, result = target.registry, target.ref, target.remote_ref, target.result

    started = time.monotonic()
    pushed = settings.push(target, local_id)
    push_seconds = time.monotonic() - started
    if not pushed.ok:
        give_up = pushed.kind in _GIVE_UP
        return result(_push_message(target, pushed), pushed.attempts, push_seconds=push_seconds), give_up
    digest = parse_digest(pushed.last.out, target.tag)
    if digest is None:
        no_digest = f"`docker push {remote}` succeeded but printed no digest: {pushed.last.last_line}"
        return result(no_digest, pushed.attempts, push_seconds=push_seconds), False

    # The daemon checks that the manifest it fetches hashes to `digest`, and the image ID is the digest
    # of the config that manifest names: equal IDs prove the registry serves exactly the local image.
    # Layers are not downloaded again (they are local); the registry refused the manifest had any been missing.
    started = time.monotonic()
    pinned = f"{target.repository}@{digest}"
    pulled = settings.with_retries(["docker", "pull", pinned], wait=registry)
    pulled_id = settings.runner.image_id(pinned) if pulled.ok else None
    verify_seconds = time.monotonic() - started
    error: str | None = None
    if not pulled.ok:
        error = f"{registry} took {ref} as {digest}, but pulling it back failed: {pulled.last.last_line}"
    elif pulled_id != local_id and not _same_config(target, pinned, local_id, settings):
        error = f"verification failed: {pinned} is image {pulled_id}, but {ref} is {local_id}"
    seconds = {"push_seconds": push_seconds, "verify_seconds": verify_seconds}
    return result(error, pushed.attempts, digest, **seconds), False


def _same_config(target: PushTarget, pinned: str, local_id: str, settings: Settings) -> bool:
    """Whether the registry's image under `pinned` has the local image's config (core.imagestore: the same image).
    Only the containerd store gets here for a good push: it names images by manifest, and a zstd push makes another
    manifest of the same config and layers."""
    if settings.image_store() != CONTAINERD or (config := settings.config_of(target.ref, local_id)) is None:
        return False
    looked = settings.manifest(target.registry, pinned)
    return looked.ok and (remote := parse_remote_tag(looked.last.out)) is not None and remote.image_id == config


def _push_message(target: PushTarget, outcome: Outcome) -> str:
    registry, ref = target.registry, target.ref
    if outcome.kind == "auth":
        return f"{registry} refused the credentials for {ref}: run `docker login {registry}` (or check --registry)"
    if outcome.kind in ("transient", "unreachable"):
        return f"{registry} is not reachable ({outcome.last.last_line}): is it running? nothing local was changed"
    return f"{registry} rejected {ref}: {outcome.last.last_line}"
