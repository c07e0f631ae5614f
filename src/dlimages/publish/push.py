"""Push built images to registries and prove each push by pulling its digest back.

What to push and what docker's answers mean is decided in pushplan.py (pure); `push_image` runs every command through
a `Runner`, so unit tests hand in a fake docker and need no engine. `docker push` is streamed, so a multi-GB push shows
its progress (progress.py) while it runs; interrupts.py handles signals and deadlines meanwhile.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from dlimages.core import usage
from dlimages.core.display import ProgressDisplay
from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import CONTAINERD, config_digest, image_store
from dlimages.core.runner import DEFAULT, NOT_FOUND, TIMED_OUT, Result, Runner
from dlimages.core.watch import Wait
from dlimages.publish.daemonregistry import registry_config
from dlimages.publish.interrupts import PushSignals
from dlimages.publish.pushplan import (
    MAX_RETRIES,
    RETRIES_ALLOWED,
    Failure,
    PushResult,
    PushTarget,
    daemon_treats_as_insecure,
    failure_kind,
    parse_digest,
    parse_remote_tag,
    plan_push,
)
from dlimages.publish.pushprogress import (
    Layer,
    PushProgress,
    is_push_output,
    parse_diff_ids,
    parse_history,
    push_layers,
)
from dlimages.publish.scratch import Scratch, untag
from dlimages.publish.zstdpush import Archives, push_zstd

Sleep = Callable[[float], None]

PUSH_TIMEOUT_S = 3600.0  # one try of a multi-GB image over a slow uplink; a hang beyond this counts as transient
INSPECT_TIMEOUT_S = 30.0
# An engine problem is neither the registry's fault nor worth retrying.
_ENGINE = re.compile(r"cannot connect to the docker daemon|error during connect|docker daemon socket", re.I)
_NO_SUCH_MANIFEST = re.compile(r"^no such manifest: ", re.M)  # `docker manifest inspect`: the tag is not there


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


@dataclass(frozen=True)
class _Outcome:
    """A command's last try, how many tries it took, and (when it failed) how."""

    last: Result
    attempts: int
    kind: Failure | None = None

    @property
    def ok(self) -> bool:
        return self.last.ok


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

    Each `docker push` shows its progress on `out` (stdout when None): layers done of all, their uncompressed
    bytes, elapsed time; one line rewritten in place on a terminal, else a line per finished layer and at least
    one every 30 s. Each try of a push is stopped after `timeout` seconds (a hang is a transient failure).
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
    settings = _Settings(runner, sleep, retries, backoff, timeout, signals, sys.stdout if out is None else out)
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
            raise _interrupted(signals.received, results, stopped.target, stopped.tag_note, settings.stage) from None
        except KeyboardInterrupt:
            raise _interrupted(signals.received, results) from None

    failed = [result for result in results if not result.ok]
    if failed:
        lines = [f"{len(failed)} of {len(results)} pushes failed:"]
        lines += [f"- {error}" for error in dict.fromkeys(str(r.error) for r in failed)]
        raise PushError("\n".join(lines), results)
    return results


@dataclass
class _Settings:
    """How every docker command of one push_image call runs."""

    runner: Runner
    sleep: Sleep
    retries: int
    backoff: float
    timeout: float
    signals: PushSignals
    out: TextIO
    _registry_config: Mapping[str, Any] | None = None
    _layers: dict[str, tuple[Layer, ...]] = field(default_factory=dict)  # image ID -> its layers
    archives: Archives | None = None  # zstd, or the containerd store: the compressed layouts skopeo pushes from
    store: str = ""  # the engine's image store (core.imagestore), read once, when needed
    configs: dict[str, str | None] = field(default_factory=dict)  # local ID -> config digest
    stage: bool = False  # layouts go to REPOSITORY@DIGEST only, to be tagged once signed (zstdpush.push_zstd)
    scratch: Scratch | None = None  # where a temporary tag is noted before it is made

    def image_store(self) -> str:
        if not self.store:
            self.store = image_store(self.runner)
        return self.store

    def config_of(self, ref: str, local_id: str) -> str | None:
        """The config digest of the local image: its ID on the classic store; on the containerd store what its
        layout kept, else what its build recorded, else what `docker save` says (once per image)."""
        if self.image_store() != CONTAINERD:
            return local_id
        if kept := self.archives.configs.get(local_id) if self.archives is not None else None:
            return kept
        if local_id not in self.configs:
            self.configs[local_id] = config_digest(ref, self.runner, CONTAINERD)
        return self.configs[local_id]

    def remote_config(self, registry: str, pinned: str) -> str | None:
        """The config digest of the image a registry serves under `pinned` (REPOSITORY@sha256:...)."""
        insecure = ["--insecure"] if self.insecure(registry) else []
        looked = self.with_retries(["docker", "manifest", "inspect", "-v", *insecure, pinned], INSPECT_TIMEOUT_S)
        remote = parse_remote_tag(looked.last.out) if looked.ok else None
        return remote.image_id if remote is not None else None

    def with_retries(self, argv: list[str], timeout: float | None = None, wait: str = "") -> _Outcome:
        """argv, tried again as `_with_retries` says; watched (core.watch) when it waits on `wait`, a registry."""

        def once(_attempt: int) -> Result:
            if wait:
                return self.runner.watched(argv, Wait(" ".join(argv[:3]), wait, timeout or self.timeout))
            return self.runner(argv, timeout=timeout or self.timeout)

        return _with_retries(once, self.retries, self.backoff, self.sleep)

    def push(self, target: PushTarget, local_id: str) -> _Outcome:
        """`docker push`, streamed with its progress shown, tried again as `with_retries` does; with archives,
        skopeo's zstd copy of the saved image instead."""
        if self.archives is not None:
            if local_id not in self.archives.made:
                kind = f"{self.archives.compression} level {self.archives.level}"
                self.out.write(f"{kind}: compressing {target.ref}'s layers as the engine saves it\n")
                self.out.flush()
            archive, failed = self.archives.archive(target.ref, local_id)
            if archive is None:
                assert failed is not None
                return _Outcome(failed, 1, "other")
            self.out.write(f"push {target.ref} -> {target.registry}: its {self.archives.compression} layers (skopeo)\n")
            insecure = self.insecure(target.registry)

            def once(_attempt: int) -> Result:
                return push_zstd(
                    self.runner, archive, target.ref, target.remote_ref, target.tag, insecure, self.timeout, self.stage
                )

            return _with_retries(once, self.retries, self.backoff, self.sleep)
        if local_id not in self._layers:
            self._layers[local_id] = _image_layers(self.runner, local_id)
        layers = self._layers[local_id]
        return _with_retries(
            lambda attempt: _stream_push(target, layers, attempt, self), self.retries, self.backoff, self.sleep
        )

    def insecure(self, registry: str) -> bool:
        """Whether dockerd reaches `registry` without verified TLS (its RegistryConfig is read once, when needed)."""
        if self._registry_config is None:
            self._registry_config = registry_config(self.runner)
        return daemon_treats_as_insecure(registry, self._registry_config)


def _interrupted(
    signal_name: str | None,
    results: Sequence[PushResult],
    target: PushTarget | None = None,
    tag_note: str = "",
    staged: bool = False,
) -> PushInterrupted:
    name = signal_name or "SIGINT"  # Ctrl-C where no handler of ours runs (another thread)
    done = sum(result.ok for result in results)
    if target is None:
        lines = [f"interrupted by {name}: no temporary tag is left and nothing local was changed."]
    else:
        lines = [
            f"interrupted by {name} while pushing {target.ref} to {target.registry}: {tag_note}, and nothing else "
            f"local was changed; "
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
    target: PushTarget, local_id: str, settings: _Settings, signals: PushSignals, immutable: bool
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


def _immutable_tag_problem(target: PushTarget, local_id: str, settings: _Settings) -> tuple[str | None, bool, int]:
    """Why the registry's copy of this immutable tag forbids the push (None: absent, or the very same image),
    whether the registry's other refs are not worth trying, and how many tries reading the registry took when it
    failed (a registry that refuses the credentials or is down counts as the push's attempts)."""
    insecure = ["--insecure"] if settings.insecure(target.registry) else []
    argv = ["docker", "manifest", "inspect", "-v", *insecure, target.remote_ref]
    looked = settings.with_retries(argv, INSPECT_TIMEOUT_S)
    if not looked.ok:
        if _NO_SUCH_MANIFEST.search(looked.last.err or looked.last.out):
            return None, False, 0
        if looked.kind in ("auth", "transient", "unreachable"):
            return _push_message(target, looked), True, looked.attempts
        return (
            (
                f"cannot tell which image {target.registry} serves under the immutable tag {target.tag} "
                f"({looked.last.last_line}), so {target.ref} was not pushed: --force-overwrite pushes without looking"
            ),
            False,
            0,
        )
    remote = parse_remote_tag(looked.last.out)
    if remote is None:
        return (
            (
                f"cannot read what {target.registry} serves under the immutable tag {target.tag} (unexpected output of "
                f"`docker manifest inspect`), so {target.ref} was not pushed: --force-overwrite pushes without looking"
            ),
            False,
            0,
        )
    if remote.image_id == settings.config_of(target.ref, local_id):
        return None, False, 0
    return (
        (
            f"{target.remote_ref} is an immutable tag and {target.registry} already has another image under it: "
            f"the registry serves {remote.describe()}, {target.ref} is image {local_id}; nothing was pushed. "
            "Release it under a new tag, or give --force-overwrite to replace the registry's image"
        ),
        False,
        0,
    )


def _push_tagged(target: PushTarget, local_id: str, settings: _Settings) -> tuple[PushResult, bool]:
    registry, ref, remote, result = target.registry, target.ref, target.remote_ref, target.result
    runner = settings.runner

    started = time.monotonic()
    pushed = settings.push(target, local_id)
    push_seconds = time.monotonic() - started
    if not pushed.ok:
        give_up = pushed.kind in ("auth", "transient", "unreachable")
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
    pulled_id = runner.image_id(pinned) if pulled.ok else None
    verify_seconds = time.monotonic() - started
    error: str | None = None
    if not pulled.ok:
        error = f"{registry} took {ref} as {digest}, but pulling it back failed: {pulled.last.last_line}"
    elif pulled_id != local_id and not _same_config(target, pinned, local_id, settings):
        error = f"verification failed: {pinned} is image {pulled_id}, but {ref} is {local_id}"
    seconds = {"push_seconds": push_seconds, "verify_seconds": verify_seconds}
    return result(error, pushed.attempts, digest, **seconds), False


def _same_config(target: PushTarget, pinned: str, local_id: str, settings: _Settings) -> bool:
    """Whether the registry's image under `pinned` has the local image's config (core.imagestore: the same image).
    Only the containerd store gets here for a good push: it names images by manifest, and a zstd push makes another
    manifest of the same config and layers."""
    if settings.image_store() != CONTAINERD:
        return False
    config = settings.config_of(target.ref, local_id)
    return config is not None and settings.remote_config(target.registry, pinned) == config


def _push_message(target: PushTarget, outcome: _Outcome) -> str:
    registry, ref = target.registry, target.ref
    if outcome.kind == "auth":
        return f"{registry} refused the credentials for {ref}: run `docker login {registry}` (or check --registry)"
    if outcome.kind in ("transient", "unreachable"):
        return f"{registry} is not reachable ({outcome.last.last_line}): is it running? nothing local was changed"
    return f"{registry} rejected {ref}: {outcome.last.last_line}"


def _with_retries(once: Callable[[int], Result], retries: int, backoff: float, sleep: Sleep) -> _Outcome:
    attempt = 0
    while True:
        attempt += 1
        done = once(attempt)
        if done.ok:
            return _Outcome(done, attempt)
        kind = failure_kind(done.err or done.out)  # stdout holds progress lines, which say nothing
        if kind != "transient" or attempt > retries:
            return _Outcome(done, attempt, kind)
        sleep(backoff * 2 ** (attempt - 1))


def _image_layers(runner: Runner, image_id: str) -> tuple[Layer, ...]:
    """The image's layers as `docker push` names them, with their uncompressed sizes where history tells them;
    none when the engine cannot say (the progress then counts the layers docker names, without bytes)."""
    inspect = ["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", image_id]
    rootfs = runner(inspect, timeout=INSPECT_TIMEOUT_S)
    diff_ids = parse_diff_ids(rootfs.out) if rootfs.ok else None
    if not diff_ids:
        return ()
    rows = ["docker", "history", "--human=false", "--no-trunc", "--format", "{{.Size}} {{json .CreatedBy}}", image_id]
    history = runner(rows, timeout=INSPECT_TIMEOUT_S)
    return push_layers(diff_ids, parse_history(history.out) if history.ok else None)


def _stream_push(target: PushTarget, layers: Sequence[Layer], attempt: int, settings: _Settings) -> Result:
    """One try of `docker push`, its output streamed through a PushProgress; the Result a captured run would give
    (docker's progress lines as stdout, anything else, its errors, as stderr), 124 when it passed the timeout."""
    argv = ("docker", "push", target.remote_ref)
    display = ProgressDisplay(PushProgress(target.ref, target.registry, layers, attempt=attempt), settings.out)
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        display.feed(line)

    try:
        with display.ticking():
            code = settings.signals.bounded(settings.timeout, lambda: settings.runner.stream(argv, on_line))
    except KeyboardInterrupt:
        display.finish("interrupted")
        raise
    if code is None:
        lines.append(f"docker push timed out after {settings.timeout:g} s")
        display.finish(f"stopped after {settings.timeout:g} s")
    else:
        display.finish(None if code == 0 else f"failed (exit {code})")
    out = "".join(f"{line}\n" for line in lines if is_push_output(line))
    err = "".join(f"{line}\n" for line in lines if not is_push_output(line))
    if code is None:
        return Result(argv, TIMED_OUT, out, err, hung=True)
    return Result(argv, code, out, err, missing=code == NOT_FOUND)
