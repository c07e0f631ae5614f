"""SIGINT, SIGTERM and deadlines during a push: a signal stops the push but never its cleanup, and a streamed command
that runs past its deadline is stopped."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any


class _Hung(KeyboardInterrupt):
    """A streamed command ran past its deadline. A KeyboardInterrupt, because that is what makes the runner stop
    the command it streams (it terminates the child, then re-raises); `PushSignals.bounded` turns it into a result."""


class PushSignals:
    """SIGINT and SIGTERM during a push: the first one raises KeyboardInterrupt where the push is (which kills the
    docker command it waits on); if it comes while a temporary tag is being removed, the removal finishes first and
    `check` raises it after. Later signals are ignored, so the cleanup always finishes. Handlers exist only in the
    main thread, as signals do.

    SIGALRM bounds a streamed command (`bounded`): a timer thread sends it to the main thread, where it interrupts
    the blocking read of the command's output and the handler raises _Hung."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._cleaning = False
        self._installed = False
        self._alarm_due = False  # a deadline passed and its SIGALRM is on its way
        self._previous_alarm: Any = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signal.Signals(signum).name
        if not self._cleaning:
            raise KeyboardInterrupt(self.received)

    def _alarm(self, signum: int, frame: FrameType | None) -> None:
        if self._alarm_due:
            self._alarm_due = False
            raise _Hung
        if callable(self._previous_alarm):  # not ours: whoever set SIGALRM up before gets it
            self._previous_alarm(signum, frame)

    @contextlib.contextmanager
    def installed(self) -> Iterator[PushSignals]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {number: signal.signal(number, self._handle) for number in (signal.SIGINT, signal.SIGTERM)}
        previous[signal.SIGALRM] = self._previous_alarm = signal.signal(signal.SIGALRM, self._alarm)
        self._installed = True
        try:
            yield self
        finally:
            self._installed = False
            for number, handler in previous.items():
                signal.signal(number, signal.SIG_DFL if handler is None else handler)

    def bounded(self, seconds: float, run: Callable[[], int]) -> int | None:
        """run() unless it takes more than `seconds`: then it is interrupted (the runner stops its command) and the
        answer is None. Without our handlers (off the main thread) run() is not bounded."""
        if not self._installed:
            return run()
        main = threading.main_thread().ident
        assert main is not None

        def expire() -> None:
            self._alarm_due = True
            signal.pthread_kill(main, signal.SIGALRM)

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        try:
            try:
                timer.start()
                return run()
            finally:
                timer.cancel()
                timer.join()
                self._alarm_due = False  # too late to matter: the command has ended
        except _Hung:
            return None

    @contextlib.contextmanager
    def cleanup(self) -> Iterator[None]:
        """A block a signal does not interrupt (`check` raises it afterwards)."""
        self._cleaning = True
        try:
            yield
        finally:
            self._cleaning = False

    def check(self) -> None:
        """Raise the signal that came during a cleanup, now that the cleanup is done."""
        if self.received is not None:
            raise KeyboardInterrupt(self.received)
