"""Progress of long docker commands: trackers read `docker push` and `docker buildx build --progress=plain` output one
line at a time and say where the work stands; `ProgressDisplay` shows that on a terminal or in a log.

Trackers are pure (fed text, asked for a status line; the clock is handed in). What `docker push` prints without a
terminal, measured on Docker 26.1 (classic image store): `ID: Preparing`, `ID: Waiting`, `ID: Retrying in N seconds`
(every second while it waits), then one of `ID: Pushed`, `ID: Layer already exists`, `ID: Mounted from REPO`, and
last `TAG: digest: sha256:... size: N`. ID is the first 12 hex digits of the layer's diff ID (`docker image inspect`
RootFS.Layers: the digest of the uncompressed layer). Byte counts (`Pushing 12MB/150MB`) appear only on a terminal,
so bytes come from `docker history`: each layer's uncompressed size, counted when the layer is done.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

Clock = Callable[[], float]

WIDTH = 100  # the longest status line, in columns (a terminal narrower than this gets its own width)
REFRESH_S = 0.25  # a terminal's status line is rewritten at most this often (a finished layer or step: at once)
HEARTBEAT_S = 30.0  # without a terminal, a status line at least this often, even when nothing finished

# --- docker push -------------------------------------------------------------------------------------------------

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
        parts = [_tally(len(self._done), len(self._sizes), "layers", len(self._already_there), "already there")]
        if self.bytes_total is not None:
            parts.append(format_bytes(self.bytes_done or 0, self.bytes_total))
        parts.append(format_duration(self.elapsed()))
        if self._retrying and not self.finished:
            parts.append(f"retrying {len(self._retrying)} {'layer' if len(self._retrying) == 1 else 'layers'}")
        if outcome or self.finished:
            parts.append(outcome or "pushed")
        return fit(self.ref, ", ".join(parts), width, verb="push", after=self._after)


# --- docker buildx build --progress=plain ------------------------------------------------------------------------

_VERTEX = re.compile(r"^#(?P<n>\d+) (?P<rest>.*?)\s*$")
_STEP = re.compile(r"^\[(?:(?P<stage>[^\]\s]+) )?(?P<k>\d+)/(?P<m>\d+)\] (?P<text>.*)$")
_VERTEX_DONE = re.compile(r"^DONE \d+(?:\.\d+)?s$")
_LOG = re.compile(r"^\d+\.\d+ ")  # `#5 0.227 step two`: what the step printed, and when


@dataclass
class _Step:
    stage: str
    index: int
    text: str  # `[5/9] RUN pip install ...` as shown, options and the automatic stage name left out


class BuildProgress:
    """Where one `docker buildx build --progress=plain` stands: steps done of all (a cached step is done), the step
    running now, elapsed time. Steps are the Dockerfile's instructions, `[k/M]` per stage (BuildKit runs a stage's
    steps in order, so step k starting means steps 1..k-1 are done, also one it merged with another stage's)."""

    def __init__(self, label: str, *, clock: Clock = time.monotonic) -> None:
        self.label = label
        self._clock = clock
        self._start = clock()
        self._stage_sizes: dict[str, int] = {}
        self._steps: dict[int, _Step] = {}  # vertex number -> step
        self._done: set[tuple[str, int]] = set()
        self._cached: set[tuple[str, int]] = set()
        self._names: dict[int, str] = {}  # vertices that are not steps: `exporting to image`, `[internal] ...`
        self._current: int | None = None
        self._finished: set[int] = set()
        self.failed: str | None = None  # the step (or phase) that failed
        self.exported = False

    @property
    def steps_total(self) -> int | None:
        return sum(self._stage_sizes.values()) or None

    @property
    def steps_done(self) -> int:
        return len(self._done)

    @property
    def steps_cached(self) -> int:
        return len(self._cached)

    @property
    def current(self) -> str | None:
        """The step or phase running now (the last one that printed and has not finished)."""
        if self._current is None:
            return None
        step = self._steps.get(self._current)
        return step.text if step else self._names.get(self._current)

    def elapsed(self) -> float:
        return self._clock() - self._start

    def feed(self, line: str) -> str | None:
        """Take one output line; the status line when it finished something (a step, the export, the build's
        failure), else None."""
        found = _VERTEX.match(line)
        if not found:
            if line.startswith("ERROR: ") and self.failed is None:
                self.failed = self.current or "the build"
                return self.status()
            return None
        vertex, rest = int(found["n"]), found["rest"]
        step = self._steps.get(vertex)
        if rest == "CACHED" or _VERTEX_DONE.match(rest):
            return self._finish(vertex, cached=rest == "CACHED")
        if rest.startswith("ERROR: "):
            self.failed = (step.text if step else self._names.get(vertex)) or f"#{vertex}"
            self._current = vertex
            return self.status()
        if rest in ("...", "CANCELED") or vertex == 0:
            return None
        header = _STEP.match(rest)
        if header and step is None:
            stage = header["stage"] or ""
            step = _Step(stage, int(header["k"]), _step_text(stage, header["k"], header["m"], header["text"]))
            self._steps[vertex] = step
            self._stage_sizes[stage] = max(self._stage_sizes.get(stage, 0), int(header["m"]))
        elif step is None and vertex not in self._names and not _LOG.match(rest):
            self._names[vertex] = rest
        if vertex not in self._finished:
            self._current = vertex
            if step is not None:
                self._done.update((step.stage, k) for k in range(1, step.index))
        return None

    def _finish(self, vertex: int, *, cached: bool) -> str | None:
        self._finished.add(vertex)
        if self._current == vertex:
            self._current = None
        step = self._steps.get(vertex)
        if step is None:
            if self._names.get(vertex, "").startswith("exporting to "):  # `image`; `docker image format` elsewhere
                self.exported = True
                return self.status()
            return None
        key = (step.stage, step.index)
        self._done.update((step.stage, k) for k in range(1, step.index + 1))
        if cached:
            self._cached.add(key)
        return self.status()

    def status(self, width: int = WIDTH, outcome: str | None = None) -> str:
        steps = _tally(self.steps_done, self.steps_total, "steps", len(self._cached), "cached")
        head = f"{steps}, {format_duration(self.elapsed())}"
        if outcome:
            head += f", {outcome}"
        elif self.failed is not None:
            return fit(self.label, head, width, verb="build", tail=f"failed at {self.failed}")
        elif self.exported:
            head += ", done"
        elif self.current:
            return fit(self.label, head, width, verb="build", tail=f"now {self.current}")
        return fit(self.label, head, width, verb="build")


_RUN_OPTIONS = re.compile(r"^(RUN)((?: +--\S+)+)")
_AUTOMATIC_STAGE = re.compile(r"^stage-\d+$")  # a stage without a name: BuildKit numbers it


def _step_text(stage: str, k: str, m: str, text: str) -> str:
    """`[5/9] RUN umask 0022 && ...`: RUN's --mount/--network options say nothing about progress."""
    where = f"{k}/{m}" if not stage or _AUTOMATIC_STAGE.match(stage) else f"{stage} {k}/{m}"
    return f"[{where}] " + _RUN_OPTIONS.sub(r"\1", " ".join(text.split()))


# --- formatting --------------------------------------------------------------------------------------------------


def _tally(done: int, total: int | None, unit: str, skipped: int, how: str) -> str:
    """`7/9 steps (2 cached)`, `3/5 layers (1 already there)`: done of all (`?` while the total is not known yet), and
    how many of those were done without work."""
    said = f"{done}/{total if total is not None else '?'} {unit}"
    return f"{said} ({skipped} {how})" if skipped else said


def format_duration(seconds: float) -> str:
    """`45s`, `1m20s`, `1h02m`."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_bytes(done: int, total: int) -> str:
    """`2.1/5.9 GB`: both in the unit that suits the total (decimal units, as `docker images` uses)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if total >= scale:
            return f"{done / scale:.1f}/{total / scale:.1f} {unit}"
    return f"{done}/{total} B"


def fit(name: str, detail: str, width: int, *, verb: str = "", after: str = "", tail: str = "") -> str:
    """`VERB NAME AFTER: DETAIL[, TAIL]` in at most `width` columns: the tail is cut first, then NAME's middle
    (an image ref's start and end tell images apart: `lab/pytorch-uni...2.1.2-py3.11-runtime`)."""
    line = f"{verb} {name}{after}: {detail}" if verb else f"{name}{after}: {detail}"
    room = width - len(line) - 2
    if tail and room >= 12:
        return f"{line}, {tail if len(tail) <= room else tail[: room - 3] + '...'}"
    if len(line) <= width:
        return line
    keep = max(width - (len(line) - len(name)) - 3, 6)
    short = name[: (keep + 1) // 2] + "..." + name[len(name) - keep // 2 :]
    return (f"{verb} {short}{after}: {detail}" if verb else f"{short}{after}: {detail}")[:width]


# --- showing it --------------------------------------------------------------------------------------------------


class Tracker(Protocol):
    def feed(self, line: str) -> str | None: ...

    def status(self, width: int = WIDTH, outcome: str | None = None) -> str: ...


class ProgressDisplay:
    """Shows a tracker's status on `out`. On a terminal (out.isatty()): one line rewritten in place, at most every
    `refresh_s`. Otherwise (a CI log): a line whenever a layer or step finishes, and a heartbeat at least every
    `heartbeat_s` while nothing does. `feed(line, echo=True)` also shows the line itself, above the status.

    Safe to use from two threads (`ticking` keeps the heartbeat and the clock going while no output comes).
    """

    def __init__(
        self,
        tracker: Tracker,
        out: TextIO,
        *,
        clock: Clock = time.monotonic,
        tty: bool | None = None,
        width: int | None = None,
        refresh_s: float = REFRESH_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.tracker = tracker
        self.out = out
        self.tty = _isatty(out) if tty is None else tty
        self.width = width or (min(WIDTH, _columns(out) - 1) if self.tty else WIDTH)
        self._clock = clock
        self._refresh_s = refresh_s
        self._heartbeat_s = heartbeat_s
        self._lock = threading.Lock()
        self._drawn_at: float | None = None  # when the terminal's status line was last drawn (None: not shown)
        self._printed_at = clock()  # when the log last got a status line
        self._last_printed = ""
        self._closed = False

    def feed(self, line: str, *, echo: bool = False) -> None:
        """One line of the command's output: tracked, and shown in full when `echo`."""
        with self._lock:
            if self._closed:
                if echo:
                    self._write(line + "\n")
                return
            milestone = self.tracker.feed(line) is not None
            if echo:
                self._write(("\r\x1b[K" if self._drawn_at is not None else "") + line + "\n")
                self._drawn_at = None
            self._show(force=milestone)

    def tick(self) -> None:
        """No new output: keep the elapsed time moving (a terminal) or give a heartbeat when one is due (a log)."""
        with self._lock:
            if not self._closed:
                self._show(force=False)

    def finish(self, outcome: str | None = None) -> None:
        """The last status line, with `outcome` (e.g. `failed (exit 1)`) if given; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            status = self.tracker.status(self.width, outcome)
            if self.tty:
                self._write(f"\r{status}\x1b[K\n")
            elif status != self._last_printed:
                self._write(status + "\n")

    @contextlib.contextmanager
    def ticking(self, every_s: float = 1.0) -> Iterator[None]:
        """Call `tick` every `every_s` seconds from a background thread while the block runs."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(every_s):
                self.tick()

        thread = threading.Thread(target=run, name="progress-tick", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    def _show(self, *, force: bool) -> None:
        now = self._clock()
        if self.tty:
            if force or self._drawn_at is None or now - self._drawn_at >= self._refresh_s:
                self._write(f"\r{self.tracker.status(self.width)}\x1b[K")
                self._drawn_at = now
        elif force or now - self._printed_at >= self._heartbeat_s:
            status = self.tracker.status(self.width)
            self._write(status + "\n")
            self._printed_at, self._last_printed = now, status

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a closed or minimal stream
        return False


def _columns(out: TextIO) -> int:
    """The terminal's width; WIDTH + 1 when it cannot tell (a pseudo-terminal without a size says 0)."""
    try:
        columns = os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return WIDTH + 1
    return columns if columns >= 20 else WIDTH + 1
