"""How the docker commands of one push_image call run: each tried again after a transient failure (sleeping backoff,
2*backoff, ...), `docker push` streamed with its progress (pushprogress.py) or skopeo's copy of a compressed layout
(zstdpush.py) instead, bounded by interrupts.py; what the engine says (image store, RegistryConfig, layers) read once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from dlimages.core.display import ProgressDisplay
from dlimages.core.imagestore import CONTAINERD, config_digest, image_store
from dlimages.core.runner import NOT_FOUND, TIMED_OUT, Result, Runner
from dlimages.core.watch import Wait
from dlimages.publish.daemonregistry import INSPECT_TIMEOUT_S, registry_config
from dlimages.publish.interrupts import PushSignals
from dlimages.publish.pushplan import Failure, PushTarget, daemon_treats_as_insecure, failure_kind
from dlimages.publish.pushprogress import (
    Layer,
    PushProgress,
    is_push_output,
    parse_diff_ids,
    parse_history,
    push_layers,
)
from dlimages.publish.scratch import Scratch
from dlimages.publish.zstdpush import Archives, push_zstd

Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Outcome:
    """A command's last try, how many tries it took, and (when it failed) how."""

    last: Result
    attempts: int
    kind: Failure | None = None

    @property
    def ok(self) -> bool:
        return self.last.ok


@dataclass
class Settings:
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

    def manifest(self, registry: str, ref: str) -> Outcome:
        """`docker manifest inspect -v` of what `registry` serves under `ref`, tried again as `with_retries` does."""
        insecure = ["--insecure"] if self.insecure(registry) else []
        return self.with_retries(["docker", "manifest", "inspect", "-v", *insecure, ref], INSPECT_TIMEOUT_S)

    def with_retries(self, argv: list[str], timeout: float | None = None, wait: str = "") -> Outcome:
        """argv, tried again as `retried` says; watched (core.watch) when it waits on `wait`, a registry."""

        def once(_attempt: int) -> Result:
            if wait:
                return self.runner.watched(argv, Wait(" ".join(argv[:3]), wait, timeout or self.timeout))
            return self.runner(argv, timeout=timeout or self.timeout)

        return self.retried(once)

    def retried(self, once: Callable[[int], Result]) -> Outcome:
        """`once(attempt)`, tried again after a transient failure up to `retries` more times."""
        attempt = 0
        while True:
            attempt += 1
            done = once(attempt)
            if done.ok:
                return Outcome(done, attempt)
            kind = failure_kind(done.err or done.out)  # stdout holds progress lines, which say nothing
            if kind != "transient" or attempt > self.retries:
                return Outcome(done, attempt, kind)
            self.sleep(self.backoff * 2 ** (attempt - 1))

    def push(self, target: PushTarget, local_id: str) -> Outcome:
        """`docker push`, streamed with its progress shown, tried again as `with_retries` does; with archives,
        skopeo's zstd copy of the saved image instead."""
        if self.archives is not None:
            if local_id not in self.archives.made:
                kind = f"{self.archives.compression} level {self.archives.level}"
                self.out.write(f"{kind}: compressing {target.ref}'s layers as the engine saves it\n")
                self.out.flush()
            archive = self.archives.archive(target.ref, local_id)
            if isinstance(archive, Result):  # docker save failed
                return Outcome(archive, 1, "other")
            self.out.write(f"push {target.ref} -> {target.registry}: its {self.archives.compression} layers (skopeo)\n")
            insecure = self.insecure(target.registry)
            args = (self.runner, archive, target.ref, target.remote_ref, target.tag, insecure, self.timeout, self.stage)
            return self.retried(lambda _attempt: push_zstd(*args))
        if local_id not in self._layers:
            self._layers[local_id] = image_layers(self.runner, local_id)
        layers = self._layers[local_id]
        return self.retried(lambda attempt: _stream_push(target, layers, attempt, self))

    def insecure(self, registry: str) -> bool:
        """Whether dockerd reaches `registry` without verified TLS (its RegistryConfig is read once, when needed)."""
        if self._registry_config is None:
            self._registry_config = registry_config(self.runner)
        return daemon_treats_as_insecure(registry, self._registry_config)


def image_layers(runner: Runner, image_id: str, diff_ids: Sequence[str] | None = None) -> tuple[Layer, ...]:
    """The image's layers (its diff IDs, asked of the engine unless given) as `docker push` names them, with their
    uncompressed sizes where history tells them; none when the engine cannot say (the progress then counts the
    layers docker names, without bytes)."""
    if diff_ids is None:
        inspect = ["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", image_id]
        rootfs = runner(inspect, timeout=INSPECT_TIMEOUT_S)
        diff_ids = parse_diff_ids(rootfs.out) if rootfs.ok else None
    if not diff_ids:
        return ()
    rows = ["docker", "history", "--human=false", "--no-trunc", "--format", "{{.Size}} {{json .CreatedBy}}", image_id]
    history = runner(rows, timeout=INSPECT_TIMEOUT_S)
    return push_layers(diff_ids, parse_history(history.out) if history.ok else None)


def _stream_push(target: PushTarget, layers: Sequence[Layer], attempt: int, settings: Settings) -> Result:
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
