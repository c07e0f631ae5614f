"""publish.scratch: a push's folder is locked while it lives; the next push sweeps the folders of dead pushes and the
temporary tags they noted, but nothing of a live push, and no tag that names another image now."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from dlimages.core.runner import Runner
from dlimages.publish import scratch
from dlimages.publish.scratch import Scratch, sweep

SRC = str(Path(scratch.__file__).parents[2])
OLD = time.time() - 3600


class Engine:
    """Just enough of `docker image inspect` and `docker rmi` for the sweep."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags, self.removed = tags, []

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:3] == ["image", "inspect"]:
            found = self.tags.get(argv[-1])
            return subprocess.CompletedProcess(argv, 0 if found else 1, f"{found}\n" if found else "", "")
        assert argv[1] == "rmi", argv
        self.removed.append(argv[-1])
        self.tags.pop(argv[-1])
        return subprocess.CompletedProcess(argv, 0, "", "")


def _dead_push(root: Path, *lines: str) -> Path:
    """A push killed with SIGKILL: its folder and journal stay, its lock went with it."""
    script = textwrap.dedent(f"""
        import sys, os
        sys.path.insert(0, {SRC!r})
        from pathlib import Path
        from dlimages.publish.scratch import Scratch
        s = Scratch(Path({str(root)!r}))
        for line in {list(lines)!r}:
            s.note_tag(*line.split())
        (s.folder / "layouts").mkdir()
        (s.folder / "layouts" / "blob").write_bytes(b"x" * 1000)
        print(s.folder, flush=True)
        os.kill(os.getpid(), 9)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    folder = Path(done.stdout.strip())
    os.utime(folder, (OLD, OLD))
    return folder


def test_a_dead_pushs_folder_and_its_temporary_tag_are_swept(tmp_path: Path) -> None:
    folder = _dead_push(tmp_path, "r/x:1 x:1 sha256:a", "r/y:1 y:1 sha256:b")
    engine = Engine({"x:1": "sha256:a", "r/x:1": "sha256:a", "y:1": "sha256:b", "r/y:1": "sha256:c"})
    said = sweep(tmp_path, Runner(run=engine))
    assert not folder.exists()
    assert engine.removed == ["r/x:1"]  # r/y:1 names another image now: not the dead push's to remove
    assert said == ["the temporary tag r/x:1", f"{folder.name}, left by a push that was stopped"]


def test_a_live_push_is_left_alone(tmp_path: Path) -> None:
    live = Scratch(tmp_path)
    live.note_tag("r/x:1", "x:1", "sha256:a")
    os.utime(live.folder, (OLD, OLD))
    engine = Engine({"x:1": "sha256:a", "r/x:1": "sha256:a"})
    assert sweep(tmp_path, Runner(run=engine)) == [] and live.folder.is_dir() and engine.removed == []
    live.close()
    assert not live.folder.exists() and not list((tmp_path / ".work").iterdir())


def test_a_young_folder_may_belong_to_a_push_that_has_not_locked_it_yet(tmp_path: Path) -> None:
    young = tmp_path / ".work" / "push-new"
    young.mkdir(parents=True)
    assert sweep(tmp_path, Runner(run=Engine({}))) == [] and young.is_dir()
