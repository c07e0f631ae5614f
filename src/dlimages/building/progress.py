"""Progress of `docker buildx build --progress=plain`, read from its output one line at a time (pure: fed text,
asked for a status line; the clock is handed in): steps, cached, running; core/display shows it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from dlimages.core.display import WIDTH, Clock, fit, format_duration, tally

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
        steps = tally(self.steps_done, self.steps_total, "steps", len(self._cached), "cached")
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
