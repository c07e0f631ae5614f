"""core.watch with real processes: a command that prints nothing is stopped at the stall limit, one that keeps talking
runs to its deadline, progress lines come while it waits, and the command dies with its caller however it stops."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dlimages.core import watch
from dlimages.core.runner import TIMED_OUT, Runner
from dlimages.core.watch import Wait

SRC = str(Path(watch.__file__).parents[2])


def test_a_command_that_falls_silent_is_stopped_at_the_stall_limit_naming_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(watch.STALL_ENV, "1.5")
    started = time.monotonic()
    done = Runner().watched(["sh", "-c", "echo hello; sleep 60"], Wait("pulling x:1", "registry.test", 600))
    took = time.monotonic() - started
    assert 1.5 <= took < 5, took
    assert done.hung and done.code == TIMED_OUT
    assert "nothing came from registry.test for 1.5 s while pulling x:1" in done.err
    assert "hello" in done.err  # its last words


def test_a_command_that_keeps_talking_is_not_stalled_but_stopped_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(watch.STALL_ENV, "1")
    done = Runner().watched(["sh", "-c", "while :; do echo .; sleep 0.3; done"], Wait("copying", "h", 3))
    assert done.hung and "did not finish within 3 s" in done.err


def test_output_on_a_terminal_is_read_as_lines_and_the_exit_code_kept() -> None:
    argv = ["sh", "-c", "[ -t 1 ] && printf 'a\\r\\033[2Kb\\nDigest: sha256:1\\n'; exit 3"]
    done = Runner().watched(argv, Wait("pulling", "h", 30))
    assert done.code == 3 and done.out.splitlines() == ["b", "Digest: sha256:1"] and done.err == done.out
    piped = Runner().watched(["sh", "-c", "[ -t 1 ] || echo not a terminal"], Wait("signing", "h", 30, tty=False))
    assert piped.ok and piped.out == "not a terminal" and piped.err == ""


def test_a_long_wait_says_how_long_and_what_it_last_heard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "PROGRESS_S", 0.5)
    said: list[str] = []
    done = watch.watch(["sh", "-c", "echo layer 1; sleep 2.5"], Wait("pulling x", "h", 30), say=said.append)
    assert done.code == 0 and len(said) >= 2
    assert all(line.startswith("... pulling x (h): ") and line.endswith("s; layer 1") for line in said), said


def test_a_missing_program_is_exit_127() -> None:
    done = Runner().watched(["no-such-program-here"], Wait("pulling", "h", 30))
    assert done.missing and "cannot run no-such-program-here" in done.err


def test_ctrl_c_stops_the_command_at_once() -> None:
    # Ctrl-C as at a terminal: a run started in a shell's background (CI) inherits SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.5, _thread.interrupt_main).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            Runner().watched(["sh", "-c", "sleep 60"], Wait("pulling", "h", 600))
        assert time.monotonic() - started < 3
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_command_dies_with_its_caller_when_that_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from dlimages.core.runner import Runner
        from dlimages.core.watch import Wait
        Runner().watched(["sh", "-c", "echo $$ > {pid_file}; exec sleep 60"], Wait("pulling", "h", 600))
    """)
    caller = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    child = int(pid_file.read_text())
    caller.kill()
    caller.wait()
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, 9)
    pytest.fail("the watched command outlived its killed caller")
