"""Progress shown while long work runs: `ProgressDisplay` draws a tracker's status line (one line rewritten on a
terminal; compact lines and a heartbeat in a log), and the small formats every status line shares."""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TextIO

Clock = Callable[[], float]


WIDTH = 100  # the longest status line, in columns (a terminal narrower than this gets its own width)
REFRESH_S = 0.25  # a terminal's status line is rewritten at most this often (a finished layer or step: at once)
HEARTBEAT_S = 30.0  # without a terminal, a status line at least this often, even when nothing finished


def tally(done: int, total: int | None, unit: str, skipped: int, how: str) -> str:
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


class Tracker(Protocol):
    def feed(self, line: str) -> str | None: ...

    def status(self, width: int = WIDTH, outcome: str | None = None) -> str: ...


class ProgressDisplay:
    """Shows a tracker's status on `out`. On a terminal (out.isatty()): one line rewritten in place, at most every
    `refresh_s`. Otherwise (a CI log): a line whenever a layer or step finishes, and a heartbeat at least every
    HEARTBEAT_S while nothing does. `feed(line, echo=True)` also shows the line itself, above the status.

    Safe to use from two threads (`ticking` keeps the heartbeat and the clock going while no output comes).
    """

    def __init__(
        self,
        tracker: Tracker,
        out: TextIO,
        *,
        clock: Clock = time.monotonic,
        tty: bool | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.tracker = tracker
        self.out = out
        self.tty = _isatty(out) if tty is None else tty
        self.width = min(WIDTH, _columns(out) - 1) if self.tty else WIDTH
        self._clock = clock
        self._refresh_s = refresh_s
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
        elif force or now - self._printed_at >= HEARTBEAT_S:
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
