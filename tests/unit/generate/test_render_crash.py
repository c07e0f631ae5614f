"""`invoke render` killed part-way and run twice at once (issue 17 item 4): afterwards one render gives back the
committed tree, every lock included.

Each test works on a git repository made from this one's files that render reads and writes, so "as it
was" is `git status` saying nothing. A render runs as a real process (`python -m invoke render`) under a small
wrapper that counts what the process does to files (create, write, rename, remove, chmod, sync) and, at a chosen
step, kills the process with SIGKILL or holds it until the test lets it go: every point is reached
deterministically, with nothing in the package that only tests use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# What render reads and writes; the rest of the repository plays no part.
TREE = (".gitignore", "matrix.yaml", "tasks.py", "templates/", "images/", "docs/")
ASSET = "images/assets/dl-entrypoint"

# `python -m invoke ARGS...`, counting the steps that change files (COUNT=all) or only the renames (COUNT=renames);
# STOP_AT=N stops before the N-th: STOP=kill sends SIGKILL, STOP=pause touches $PAUSED and waits for $GO to exist.
# STEPS=FILE: both counts, written at exit.
_WRAPPER = r"""
import atexit, builtins, io, os, signal, sys, time

stop_at, how = int(os.environ.get("STOP_AT", "0")), os.environ.get("STOP", "kill")
count = os.environ.get("COUNT", "all")
steps = {"all": 0, "renames": 0}
_open, _exists, _sleep, _close = os.open, os.path.exists, time.sleep, os.close
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def step(rename=False):
    steps["all"] += 1
    steps["renames"] += rename
    if steps[count] != stop_at or (count == "renames" and not rename):
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    _close(_open(os.environ["PAUSED"], os.O_CREAT | os.O_WRONLY, 0o644))
    deadline = time.monotonic() + 30
    while not _exists(os.environ["GO"]) and time.monotonic() < deadline:
        _sleep(0.02)


def counted(function, rename=False, writes=lambda *a, **k: True):
    def wrapper(*args, **kwargs):
        if writes(*args, **kwargs):
            step(rename)
        return function(*args, **kwargs)
    return wrapper


def opens_for_writing(file, mode="r", *args, **kwargs):
    return isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+")


os.open = counted(os.open, writes=lambda path, flags, *a, **k: bool(flags & _WRITING))
builtins.open = io.open = counted(io.open, writes=opens_for_writing)
for name in ("rename", "replace"):
    setattr(os, name, counted(getattr(os, name), rename=True))
for name in ("unlink", "remove", "rmdir", "mkdir", "chmod", "fsync"):
    setattr(os, name, counted(getattr(os, name)))
if os.environ.get("STEPS"):
    atexit.register(lambda: os.write(_open(os.environ["STEPS"], os.O_CREAT | os.O_WRONLY, 0o644),
                                     f"{steps['all']} {steps['renames']}".encode()))
sys.argv = ["invoke", *sys.argv[1:]]
from invoke.main import program
program.run()
"""


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True).stdout


def _render(root: Path, log: Path | None = None, **env: str) -> subprocess.Popen[str]:
    """Start `invoke render` in `root` under the wrapper; its output goes to `log` when given, else to a pipe."""
    return subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, "render"],
        cwd=root,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
        stdout=log.open("w", encoding="utf-8") if log else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process: subprocess.Popen[str], log: Path | None = None) -> tuple[int, str]:
    out, _ = process.communicate(timeout=120)
    return process.returncode, log.read_text(encoding="utf-8") if log else out


def _clean(root: Path) -> bool:
    return _git(root, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This repository's files that render reads and writes (tracked, or new and not ignored), rendered once and
    committed to a new git repo."""
    root = tmp_path_factory.mktemp("render-crash") / "repo"
    tracked = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *TREE).split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():  # a tracked file this working tree has deleted is no part of it
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    code, out = _finish(_render(root))  # a change in progress in this working tree may leave images/ stale
    assert code == 0, out
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "rendered")
    return root


@pytest.fixture
def repo(clone: Path) -> Iterator[Path]:
    """The committed clone; afterwards as it was, whatever the test left."""
    assert _clean(clone)
    yield clone
    _git(clone, "checkout", "-q", "--", ".")
    _git(clone, "clean", "-qfd")
    (clone / ASSET).chmod(0o755)


def _locks(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "images").rglob("*.lock*") if p.is_file())


def _drift(root: Path) -> None:
    """Work for render of every kind: Dockerfiles edited by hand, cell.json files gone, the matrix page's block
    edited by hand, an asset that lost its mode, the Dockerfile and cell.json of a cell no longer in the matrix."""
    for number, dockerfile in enumerate(sorted((root / "images").glob("*/*/Dockerfile"))):
        with dockerfile.open("a", encoding="utf-8") as handle:
            handle.write("RUN echo edited by hand\n")
        if number % 2:
            (dockerfile.parent / "cell.json").unlink()
    page = root / "docs/matrix.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| runtime |", "| edited by hand |", 1), "utf-8")
    (root / ASSET).chmod(0o644)
    gone = root / "images/pytorch/cuda9.9-torch0.1.0-py3.8-runtime"
    gone.mkdir()
    (gone / "Dockerfile").write_text("FROM scratch\n", encoding="utf-8")
    (gone / "cell.json").write_text("{}\n", encoding="utf-8")


def _assert_restored(root: Path, locks: list[str], where: str) -> None:
    code, out = _finish(_render(root))
    assert code == 0, f"{where}: the render after it failed:\n{out}"
    status = _git(root, "status", "--porcelain", "--untracked-files=all")
    assert status == "", f"{where}: one render did not give back the committed tree:\n{status}"
    assert _locks(root) == locks, where


def _steps(root: Path, tmp_path: Path) -> tuple[int, int]:
    """How many steps (all of them, and renames) a render of the drifted tree takes; the tree is then as it was."""
    _drift(root)
    counted = tmp_path / "steps"
    code, out = _finish(_render(root, STEPS=str(counted)))
    assert code == 0 and _clean(root), out
    every, renames = map(int, counted.read_text().split())
    return every, renames


def _points(total: int, count: int) -> list[int]:
    return sorted({max(1, round(total * k / count)) for k in range(1, count + 1)})


@pytest.mark.slow
def test_a_render_killed_at_any_point_loses_nothing_and_the_next_one_completes_it(repo: Path, tmp_path: Path) -> None:
    locks = _locks(repo)
    assert "images/bases.lock.json" in locks and len(locks) > 1
    every, renames = _steps(repo, tmp_path)
    # A third of the way, two thirds, at the last step; half-way through the renames and before the last one.
    points = [("all", n) for n in _points(every, 3)] + [("renames", n) for n in _points(renames, 2)]
    for count, at in points:
        where = f"SIGKILL before {count} step {at} of {every if count == 'all' else renames}"
        _drift(repo)
        code, out = _finish(_render(repo, COUNT=count, STOP_AT=str(at)))
        assert code == -9, f"{where}: the render was not killed (exit {code}):\n{out}"
        assert _locks(repo) == locks, f"{where}: locks went missing"
        _assert_restored(repo, locks, where)


def _wait_for(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def _held_trial(root: Path, tmp_path: Path, at: int) -> tuple[bool, list[tuple[int, str]]]:
    """A render held before step `at` while a second one starts: whether the second finished before the first was
    let go (they interleaved), and both exit codes and outputs."""
    paused, go, log = tmp_path / f"paused-{at}", tmp_path / f"go-{at}", tmp_path / f"second-{at}.log"
    first = _render(root, STOP="pause", STOP_AT=str(at), PAUSED=str(paused), GO=str(go))
    _wait_for(lambda: paused.exists() or first.poll() is not None)
    second = _render(root, log=log)
    _wait_for(lambda: second.poll() is not None or "waiting" in log.read_text(encoding="utf-8"))
    interleaved = second.poll() is not None
    go.touch()
    return interleaved, [_finish(first), _finish(second, log)]


@pytest.mark.slow
def test_two_renders_at_once_never_interleave_and_both_succeed(repo: Path, tmp_path: Path) -> None:
    locks = _locks(repo)
    every, _ = _steps(repo, tmp_path)
    for at in _points(every, 2):  # half-way, and before the last step
        where = f"the first render held before step {at} of {every}"
        _drift(repo)
        interleaved, results = _held_trial(repo, tmp_path, at)
        for code, out in results:
            assert code == 0, f"{where}:\n{out}"
        assert not interleaved, f"{where}: the second render ran while the first was part-way:\n{results[1][1]}"
        assert _clean(repo), f"{where}:\n{_git(repo, 'status', '--porcelain', '--untracked-files=all')}"
        assert _locks(repo) == locks, where
    # And both started at once, as people and scripts do.
    _drift(repo)
    both = [_render(repo), _render(repo)]
    for code, out in map(_finish, both):
        assert code == 0, out
    assert _clean(repo), _git(repo, "status", "--porcelain", "--untracked-files=all")
    assert _locks(repo) == locks
