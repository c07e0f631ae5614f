"""Progress of `docker push`, read from its output one line at a time (pure: fed text, asked for a status line; the
clock is handed in). What `docker push` prints without a terminal, measured on Docker 26.1 (classic image store):
`ID: Preparing`, `ID: Waiting`, `ID: Retrying in N seconds` (every second while it waits), then one of `ID: Pushed`,
`ID: Layer already exists`, `ID: Mounted from REPO`, and last `TAG: digest: sha256:... size: N`. ID is the first 12
hex digits of the layer's diff ID (`docker image inspect` RootFS.Layers: the digest of the uncompressed layer). Byte
counts (`Pushing 12MB/150MB`) appear only on a terminal, so bytes come from `docker history`: each layer's
uncompressed size, counted when the layer is done.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dlimages.core.display import WIDTH, Clock, fit, format_bytes, format_duration, tally

_LAYER_LINE = re.compile(r"^(?P<id>[0-9a-f]{12}): (?P<status>\S.*?)\s*$")
# A layer is done when pushed or found there (`there`: already in the repository, or mounted from another one).
_LAYER_DONE = re.compile(r"^(?:Pushed|(?P<there>Layer already exists|Mounted from \S+))$")
_RETRYING = re.compile(r"^Retrying in \d+ seconds?$")
_PUSH_HEADER = re.compile(r"^The push refers to repository \[\S+\]\s*$")
_PUSH_DIGEST = re.compile(r"^\S+: digest: sha256:[0-9a-f]{64} size: \d+\s*$")
# Dockerfile instructions that only change the image's config: their history rows never carry a layer.
_CONFIG_ONLY = frozenset(
    "ARG CMD ENTRYPOINT ENV EXPOSE HEALTHCHECK LABEL MAINTAINER ONBUILD SHELL STOPSIGNAL USER VOLUME".split()
)


@dataclass(frozen=True)
class Layer:
    """One layer as `docker push` names it (12 hex digits of its diff ID) and its uncompressed size, if known."""

    id: str
    size: int | None = None


def is_push_output(line: str) -> bool:
    """Whether a line is docker push's own progress or result (anything else is an error or warning)."""
    return bool(_LAYER_LINE.match(line) or _PUSH_HEADER.match(line) or _PUSH_DIGEST.match(line))


def parse_diff_ids(text: str) -> list[str] | None:
    """`docker image inspect --format '{{json .RootFS.Layers}}'`: the diff IDs, oldest layer first."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, list) or not all(isinstance(d, str) and d.startswith("sha256:") for d in data):
        return None
    return data


def parse_history(text: str) -> list[tuple[int, str]] | None:
    """`docker history --human=false --no-trunc --format '{{.Size}} {{json .CreatedBy}}'`: (bytes, instruction)
    per row, newest first as docker prints them; None when a row is not of that form."""
    rows: list[tuple[int, str]] = []
    for line in text.splitlines():
        size, _, created_by = line.partition(" ")
        try:
            instruction = json.loads(created_by)
        except ValueError:
            return None
        if not size.isdigit() or not isinstance(instruction, str):
            return None
        rows.append((int(size), instruction))
    return rows


def push_layers(diff_ids: Sequence[str], history: Sequence[tuple[int, str]] | None) -> tuple[Layer, ...]:
    """The layers `docker push` will report, oldest first, each once, with its size where history tells it.

    History has one row per Dockerfile instruction (newest first); only some rows made a layer, and `docker
    history` does not say which. A row made one if it has bytes or is not a config-only instruction (RUN, COPY,
    ADD, WORKDIR, an imported base: BuildKit makes a layer for each, even an empty one). When that does not give
    exactly one row per layer, nor do the rows with bytes, sizes stay unknown rather than guessed.
    """
    sizes: list[int] | None = None
    if history is not None:
        rows = list(reversed(history))
        made = [size for size, by in rows if size > 0 or _instruction(by) not in _CONFIG_ONLY]
        with_bytes = [size for size, _ in rows if size > 0]
        sizes = made if len(made) == len(diff_ids) else with_bytes if len(with_bytes) == len(diff_ids) else None
    layers: dict[str, int | None] = {}
    for index, diff_id in enumerate(diff_ids):
        layers.setdefault(diff_id.removeprefix("sha256:")[:12], sizes[index] if sizes else None)  # pushed once
    return tuple(Layer(layer_id, size) for layer_id, size in layers.items())


def _instruction(created_by: str) -> str:
    """The Dockerfile instruction of a history row: BuildKit writes `ENV A=1`, the classic builder
    `/bin/sh -c #(nop)  ENV A=1` (and a RUN as `/bin/sh -c COMMAND`, which is not config-only)."""
    text = created_by.strip().removeprefix("/bin/sh -c #(nop)").strip()
    return text.split(" ", 1)[0].upper()


class PushProgress:
    """Where one `docker push` stands: layers done of all, their bytes (uncompressed) when known, elapsed time.

    `layers` are the image's layers (`push_layers`); without them, or when docker names a layer not among them,
    the layers docker names are counted and bytes are left out (in every push measured, each layer said
    `Preparing` before any finished, so the total is right from the start there too).
    """

    def __init__(
        self,
        ref: str,
        registry: str,
        layers: Sequence[Layer] = (),
        *,
        attempt: int = 1,
        clock: Clock = time.monotonic,
    ) -> None:
        self.ref = ref
        self._after = f" -> {registry}" + (f" (try {attempt})" if attempt > 1 else "")
        self._sizes: dict[str, int | None] = {layer.id: layer.size for layer in layers}
        self._inspected = bool(self._sizes)
        self._seen: dict[str, None] = {}  # the layers docker named so far, in order
        self._clock = clock
        self._start = clock()
        self._done: set[str] = set()
        self._already_there: set[str] = set()
        self._retrying: set[str] = set()
        self.finished = False  # docker printed the digest: the registry has the whole image

    @property
    def bytes_total(self) -> int | None:
        """The image's uncompressed size, or None when a layer's size is unknown."""
        sizes = list(self._sizes.values())
        return sum(size for size in sizes if size is not None) if sizes and None not in sizes else None

    @property
    def bytes_done(self) -> int | None:
        """The uncompressed bytes of the layers done (an already present layer counts as done)."""
        if self.bytes_total is None:
            return None
        return sum(self._sizes[layer_id] or 0 for layer_id in self._done)

    def elapsed(self) -> float:
        return self._clock() - self._start

    def feed(self, line: str) -> str | None:
        """Take one output line; the status line when it finished something (a layer, the push), else None."""
        if _PUSH_DIGEST.match(line):
            self.finished = True
            return self.status()
        found = _LAYER_LINE.match(line)
        if not found:
            return None
        layer_id, status = found["id"], found["status"]
        if layer_id not in self._sizes:
            if self._inspected:
                # Not the layers the image was inspected to have (another image store?): count what docker names.
                self._sizes, self._inspected = dict.fromkeys(self._seen), False
            self._sizes[layer_id] = None
        self._seen.setdefault(layer_id)
        if done := _LAYER_DONE.match(status):
            first = layer_id not in self._done
            self._done.add(layer_id)
            self._retrying.discard(layer_id)
            if done["there"]:
                self._already_there.add(layer_id)
            return self.status() if first else None
        if _RETRYING.match(status):
            started = not self._retrying
            self._retrying.add(layer_id)
            return self.status() if started else None  # it repeats every second: say it once
        self._retrying.discard(layer_id)
        return None

    def status(self, width: int = WIDTH, outcome: str | None = None) -> str:
        parts = [tally(len(self._done), len(self._sizes), "layers", len(self._already_there), "already there")]
        if self.bytes_total is not None:
            parts.append(format_bytes(self.bytes_done or 0, self.bytes_total))
        parts.append(format_duration(self.elapsed()))
        if self._retrying and not self.finished:
            parts.append(f"retrying {len(self._retrying)} {'layer' if len(self._retrying) == 1 else 'layers'}")
        if outcome or self.finished:
            parts.append(outcome or "pushed")
        return fit(self.ref, ", ".join(parts), width, verb="push", after=self._after)
