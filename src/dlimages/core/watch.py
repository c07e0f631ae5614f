"""Commands that wait on a network (docker pull, skopeo, cosign), watched: a progress line while they run, stopped when
nothing arrives for a while or when their deadline passes, with a message naming the host they waited on.

Docker and skopeo show their progress only on a terminal, so they get a pseudo-terminal of their own: any byte they
print is a sign of life, and a registry that stops answering is seen within `stall_seconds()`, not after an hour.
cosign gets a pipe (on a terminal it would prompt for a password). Each command runs in its own session and dies with
this process (PR_SET_PDEATHSIG), so neither Ctrl-C nor SIGKILL leaves one running on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

STALL_ENV = "DLIMAGES_STALL_S"
STALL_S = 180.0  # a registry silent this long is not coming back (docker's own pull waits up to an hour)
PROGRESS_S = 30.0
_PR_SET_PDEATHSIG = 1
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]")


@dataclass(frozen=True)
class Watched:
    """How a watched command ended: its exit code (None when it could not start or was stopped), its output
    (stdout and stderr together, as lines), and why it was stopped or could not start."""

    code: int | None
    output: str
    stopped: str = ""


@dataclass(frozen=True)
class Wait:
    """What a watched command waits for, in words ("pulling x:1"), and from which host."""

    what: str
    host: str
    timeout: float
    tty: bool = True


def stall_seconds(env: Mapping[str, str] = os.environ) -> float:
    """How long a watched command may print nothing: DLIMAGES_STALL_S, else 180 s."""
    try:
        value = float(env.get(STALL_ENV, STALL_S))
    except ValueError:
        return STALL_S
    return value if value > 0 else STALL_S


def plain(raw: bytes) -> list[str]:
    """A terminal's output as lines: escape sequences gone, a line rewritten in place (\\r) counted as one."""
    text = _ANSI.sub("", raw.decode(errors="replace")).replace("\r\n", "\n")
    return [line.strip() for chunk in text.split("\n") for line in chunk.split("\r")[-1:] if line.strip()]


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def watch(
    argv: Sequence[str], wait: Wait, env: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None
) -> Watched:
    """Run argv to the end as the module says."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    args, stall = tuple(argv), stall_seconds()
    reader, writer = pty.openpty() if wait.tty else os.pipe()
    try:
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=writer,
            env=None if env is None else dict(env),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    except OSError as error:
        os.close(reader)
        return Watched(None, "", f"cannot run {args[0]}: {error}")
    finally:
        os.close(writer)
    output, started = bytearray(), time.monotonic()
    heard = said = started
    stopped = ""
    try:
        while True:
            now = time.monotonic()
            if now - heard > stall:
                stopped = (
                    f"stopped: nothing came from {wait.host} for {stall:g} s while {wait.what} "
                    f"({STALL_ENV} sets how long to wait)"
                )
                break
            if now - started > wait.timeout:
                stopped = f"stopped: {wait.what} (from {wait.host}) did not finish within {wait.timeout:g} s"
                break
            if now - said >= PROGRESS_S:
                said = now
                last = plain(bytes(output[-4096:]))
                quiet = f", nothing for {now - heard:.0f} s" if now - heard >= PROGRESS_S else ""
                say(f"... {wait.what} ({wait.host}): {now - started:.0f} s{quiet}{'; ' + last[-1] if last else ''}")
            ready, _, _ = select.select([reader], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(reader, 65536)
            except OSError:  # EIO: the terminal's other end closed
                chunk = b""
            if not chunk:
                break
            output += chunk
            heard = time.monotonic()
        if stopped:
            _stop(proc)
            lines = plain(bytes(output))
            tail = f" (its last words: {lines[-1]})" if lines else ""
            return Watched(None, "\n".join(lines), stopped + tail)
        code = proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        os.close(reader)
    return Watched(code, "\n".join(plain(bytes(output))))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
