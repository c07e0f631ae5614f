"""engine.py without Docker: when a task starts the engine itself, and what it says when it may not or cannot.
The real thing (no engine running, `invoke build` starts one) is measured in docs/notes/measurements.md."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.build.engine import ENGINE_SCRIPT, EngineUnavailable, ensure_engine, setup_allowed
from dlimages.core.runner import Runner

ROOT = Path("/repo")


class FakeHost:
    """`docker info` fails until the engine script has run (or always, when `starts` is False)."""

    def __init__(self, *, up: bool = False, starts: bool = True, script_code: int = 0) -> None:
        self.up, self.starts, self.script_code = up, starts, script_code
        self.scripts: list[tuple[str, ...]] = []

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0 if self.up else 1, "26.1.5\n" if self.up else "", "")

    def stream(self, argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        self.scripts.append(tuple(argv))
        on_line("engine.sh: dockerd answers after 2s")
        self.up = self.starts
        return self.script_code

    @property
    def runner(self) -> Runner:
        return Runner(self.run, self.stream)


@pytest.mark.parametrize(
    ("flag", "environ", "allowed"),
    [
        (False, {}, True),
        (True, {}, False),
        (False, {"DLIMAGES_NO_ENGINE_SETUP": "1"}, False),
        (False, {"DLIMAGES_NO_ENGINE_SETUP": "yes"}, False),
        (False, {"DLIMAGES_NO_ENGINE_SETUP": "0"}, True),
        (False, {"DLIMAGES_NO_ENGINE_SETUP": ""}, True),
    ],
)
def test_setup_is_on_unless_turned_off(flag: bool, environ: dict[str, str], allowed: bool) -> None:
    assert setup_allowed(flag, environ) is allowed


def test_a_running_engine_is_left_alone() -> None:
    host = FakeHost(up=True)
    ensure_engine(ROOT, host.runner, setup=True, on_line=pytest.fail)
    assert host.scripts == []


def test_no_engine_starts_one_saying_so_in_one_line() -> None:
    host, said = FakeHost(), []
    ensure_engine(ROOT, host.runner, setup=True, on_line=said.append)
    [script] = host.scripts
    assert script[:2] == ("bash", str(ROOT / ENGINE_SCRIPT))
    assert said[0].endswith(": starting one with scripts/engine.sh (--no-engine-setup turns this off)")
    assert said[1] == "engine.sh: dockerd answers after 2s"


def test_a_user_who_is_not_root_is_told_the_one_command_that_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    host = FakeHost()
    with pytest.raises(EngineUnavailable) as caught:
        ensure_engine(ROOT, host.runner, setup=True, on_line=pytest.fail)
    assert host.scripts == []  # it would only die halfway through an apt-get install
    assert "needs root: `sudo bash scripts/engine.sh` once" in str(caught.value)


def test_setup_turned_off_says_what_to_do_and_starts_nothing() -> None:
    host = FakeHost()
    with pytest.raises(EngineUnavailable) as caught:
        ensure_engine(ROOT, host.runner, setup=False, on_line=pytest.fail)
    assert host.scripts == []
    assert "not starting one (DLIMAGES_NO_ENGINE_SETUP or --no-engine-setup)" in str(caught.value)
    assert "`bash scripts/engine.sh`" in str(caught.value)


@pytest.mark.parametrize(("starts", "code"), [(False, 0), (True, 1), (False, 1)])
def test_a_failed_start_is_an_error_not_a_build_against_nothing(starts: bool, code: int) -> None:
    host = FakeHost(starts=starts, script_code=code)
    with pytest.raises(EngineUnavailable) as caught:
        ensure_engine(ROOT, host.runner, setup=True, on_line=lambda _: None)
    assert f"scripts/engine.sh exited {code}" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("sources.list.d/debian.sources", "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"),
        ("sources.list", "deb http://mirror.example/debian bookworm main\n"),
    ],
)
def test_the_engine_script_run_by_hand_outside_the_projects_python_finds_the_mirror(
    tmp_path: Path, name: str, text: str
) -> None:
    """`bash scripts/engine.sh` as the README says, with no dlimages importable: no traceback, the host's mirror."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\nexit 1\n")
    (fake / "python3").chmod(0o755)
    apt = tmp_path / "apt"
    (apt / name).parent.mkdir(parents=True, exist_ok=True)
    (apt / name).write_text(text)
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    done = subprocess.run(
        ["bash", "-c", 'source "$1" && host_debian_mirror', "bash", str(script)],
        env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "APT_DIR": str(apt)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "http://mirror.example/debian\n", "")


@pytest.mark.parametrize("fixtures", [0, 1])
def test_the_engine_script_installs_the_test_fixtures_only_when_asked(fixtures: int) -> None:
    """A user's first build needs the engine, buildx, skopeo, mmdebstrap and dpkg-dev (dpkg-scanpackages); a registry
    and a browser are the tests'."""
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    done = subprocess.run(
        ["bash", "-c", f'source "$1" && FIXTURES={fixtures} && wanted_packages', "bash", str(script)],
        capture_output=True,
        text=True,
        check=True,
    )
    wanted = {line.split("=")[0] for line in done.stdout.split()}
    assert {"docker.io", "docker-cli", "docker-buildx", "skopeo", "mmdebstrap", "dpkg-dev"} <= wanted
    fixtures_wanted = wanted & {"docker-registry", "apache2-utils", "chromium", "chromium-driver"}
    assert fixtures_wanted == (
        {"docker-registry", "apache2-utils", "chromium", "chromium-driver"} if fixtures else set()
    )


def test_the_engine_script_refuses_an_unknown_argument_and_names_the_allowed_ones() -> None:
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    done = subprocess.run(["bash", str(script), "--fixture"], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "unknown argument '--fixture'" in done.stderr and "[--fixtures]" in done.stderr
