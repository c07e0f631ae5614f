"""The one way dlimages runs host commands (docker above all): every caller gets a `Result`, never an exception,
for the failures it expects (a non-zero exit, a missing program, a hang).

Builder, push, doctor, tasks and the image tests all take a `Runner`; unit tests hand in one built on a fake `run`
(subprocess.run's signature) and a fake `stream`, so deciding code is tested without an engine.
"""

from __future__ import annotations

import atexit
import functools
import io
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dlimages.core import watch
from dlimages.core.engines import Engine, read_engine

Run = Callable[..., "subprocess.CompletedProcess[str]"]
# Runs argv in cwd, hands every output line (stdout and stderr merged, without its newline) to the callback,
# returns the exit code. Ctrl-C stops the child before it propagates.
Stream = Callable[[Sequence[str], Path | None, Callable[[str], None]], int]

TIMEOUT_S = 60.0  # inspect, tag, rmi, info: quick commands on a busy engine
TIMED_OUT = 124  # the exit codes coreutils `timeout` and shells use
NOT_FOUND = 127


@dataclass(frozen=True)
class Result:
    """What one command did: its exit code and output (124 when it hung, 127 when it could not start)."""

    argv: tuple[str, ...]
    code: int
    out: str = ""
    err: str = ""
    hung: bool = False  # killed after its timeout (code 124)
    missing: bool = False  # the program could not be started (code 127)

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def last_line(self) -> str:
        """The last non-empty line of stderr (else stdout): what a failure message quotes."""
        lines = [line.strip() for line in (self.err or self.out).splitlines() if line.strip()]
        return lines[-1] if lines else "no output"


def stream_subprocess(argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
    except OSError as error:
        on_line(f"cannot run {argv[0]}: {error}")
        return NOT_FOUND
    with proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(timeout=30)
            raise


def byte_stream(argv: Sequence[str], timeout: float) -> tuple[IO[bytes], Callable[[], Result]]:
    """argv's stdout as bytes to read as they come (`docker save` of gigabytes, never held whole), and the function
    to call once it is read (or closed): it waits for the program, at most `timeout` seconds more, and says how it
    ended (its stderr captured). A program that cannot start gives an empty stream and exit 127."""
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        why = f"cannot run {argv[0]}: {error}"
        return io.BytesIO(b""), lambda: Result(tuple(argv), NOT_FOUND, "", why)
    assert proc.stdout is not None

    def finish() -> Result:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            return Result(tuple(argv), TIMED_OUT, "", err.decode(errors="replace"))
        return Result(tuple(argv), proc.returncode, "", err.decode(errors="replace"))

    return proc.stdout, finish


@dataclass(frozen=True)
class Runner:
    """Runs commands through `run` (captured) or `stream` (line by line, for long builds and in-image commands)."""

    run: Run = field(default=subprocess.run)
    stream_lines: Stream = field(default=stream_subprocess)

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout: float = TIMEOUT_S,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Result:
        """Run argv to the end and capture its output; a hang or a missing program becomes a failed Result."""
        args = tuple(argv)
        extra: dict[str, object] = {} if env is None else {"env": dict(env)}
        if cwd is not None:
            extra["cwd"] = cwd
        try:
            done = self.run(
                list(args),
                input=stdin,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
                **extra,
            )
        except subprocess.TimeoutExpired:
            return Result(args, TIMED_OUT, "", f"{' '.join(args[:2])} timed out after {timeout:g} s", hung=True)
        except OSError as error:
            return Result(args, NOT_FOUND, "", f"cannot run {args[0]}: {error}", missing=True)
        return Result(args, done.returncode, done.stdout or "", done.stderr or "")

    def watched(self, argv: Sequence[str], wait: watch.Wait, *, env: Mapping[str, str] | None = None) -> Result:
        """A command that waits on a network (core.watch): progress while it runs, stopped when it hears nothing
        for a while, its output (stdout and stderr together) in `out`, and in `err` too when it failed. A runner
        built on a fake `run` (unit tests) runs it as any other command."""
        if self.run is not subprocess.run:
            return self(argv, timeout=wait.timeout, env=env, stdin=None if wait.tty else "")  # cosign: no terminal
        args = tuple(argv)
        done = watch.watch(args, wait, env)
        if done.code is None:
            missing = done.stopped.startswith("cannot run")
            return Result(args, NOT_FOUND if missing else TIMED_OUT, done.output, done.stopped, not missing, missing)
        return Result(args, done.code, done.output, done.output if done.code else "")

    def docker(self, *args: str, timeout: float = TIMEOUT_S, stdin: str | None = None) -> Result:
        return self(["docker", *args], timeout=timeout, stdin=stdin)

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None], *, cwd: Path | None = None) -> int:
        return self.stream_lines(tuple(argv), cwd, on_line)

    # --- questions every Docker caller asks ------------------------------------------------------------

    def image_id(self, ref: str) -> str | None:
        """The local image ID `ref` names, or None when there is no such local image (or no engine)."""
        done = self.docker("image", "inspect", "--format", "{{.Id}}", ref)
        return (done.out.strip() or None) if done.ok else None

    def image_exists(self, ref: str) -> bool:
        return self.image_id(ref) is not None

    def engine(self) -> Engine | str:
        """The engine that answers (core.engines: what kind, from one `docker info` and one `docker version`), or
        what keeps one from answering."""
        info = self.docker("info", "--format", "{{json .}}", timeout=30)
        if info.missing:
            return "the docker CLI is not installed"
        if info.hung:
            return "the Docker engine did not answer within 30 s"
        if not info.ok:
            return "the Docker engine is not reachable (`bash scripts/engine.sh` installs and starts one)"
        version = self.docker("version", "--format", "{{json .}}", timeout=30)
        return read_engine(version.out, info.out)  # its JSON even when it fails: what it printed is still read


DEFAULT = Runner()


@functools.cache
def run_folder() -> Path:
    """This process's own folder for the files a run hands to docker and reads back (image ID files, bake files and
    their metadata, copy archives): private (0700, a fresh name), so two runs on one host, of one user or of two,
    never read or overwrite each other's; removed when the process exits."""
    path = Path(tempfile.mkdtemp(prefix="dlimages-run-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
