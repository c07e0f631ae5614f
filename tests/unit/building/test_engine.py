"""engine.py without Docker: when a task starts the engine itself, and what it says when it may not or cannot.
The real thing (no engine running, `invoke build` starts one) is measured in docs/notes/measurements.md."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from fake_engines import DOCKER, NO_BUILDX, NOT_RUNNING, OLD, PODMAN, ROOTLESS, EngineHost

from dlimages.building.engine import EngineRefused, EngineUnavailable, ensure_engine, setup_allowed
from dlimages.core.engines import Kind, Need
from dlimages.core.runner import Runner
from dlimages.core.usage import ENGINE_SCRIPT

ROOT = Path("/repo")


class FakeHost:
    """`docker info` fails until the engine script has run (or always, when `starts` is False); once up, `docker`
    answers as the engine `case` (fake_engines)."""

    def __init__(self, *, up: bool = False, starts: bool = True, script_code: int = 0, case: str = DOCKER) -> None:
        self.up, self.starts, self.script_code = up, starts, script_code
        self.engine = EngineHost(case)
        self.scripts: list[tuple[str, ...]] = []

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return self.engine.run(argv) if self.up else subprocess.CompletedProcess(argv, 1, "", NOT_RUNNING)

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


@pytest.mark.parametrize(("case", "need"), [(PODMAN, Need.BUILDKIT), (PODMAN, Need.BASE), (NO_BUILDX, Need.BUILDKIT)])
@pytest.mark.parametrize("setup", [True, False])
def test_an_engine_that_cannot_serve_the_task_is_refused_and_never_replaced(
    case: str, need: Need, setup: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It answers, so engine.sh would leave it as it is: the refusal comes at once, whoever runs the task."""
    monkeypatch.setattr("os.geteuid", lambda: 0)
    host = FakeHost(up=True, case=case)
    with pytest.raises(EngineRefused) as caught:
        ensure_engine(ROOT, host.runner, setup=setup, on_line=pytest.fail, need=need)
    assert host.scripts == []
    assert str(caught.value) == host.runner.engine().refusal(need)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("case", "need", "kinds"),
    [
        (PODMAN, Need.DOCKER, (Kind.PODMAN,)),
        (NO_BUILDX, Need.BASE, (Kind.NO_BUILDX,)),
        (OLD, Need.BUILDKIT, (Kind.OLD,)),
    ]
    + [(ROOTLESS, need, (Kind.ROOTLESS,)) for need in Need],
)
def test_an_engine_that_can_serve_the_task_is_handed_back_with_its_kinds(
    case: str, need: Need, kinds: tuple[Kind, ...]
) -> None:
    found = ensure_engine(ROOT, FakeHost(up=True, case=case).runner, setup=True, on_line=pytest.fail, need=need)
    assert found.kinds == kinds


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
    """A user's first build needs the engine, buildx, skopeo, mmdebstrap and dpkg-dev (dpkg-scanpackages), and a push
    cosign; a registry and a browser are the tests'."""
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    done = subprocess.run(
        ["bash", "-c", f'source "$1" && FIXTURES={fixtures} && wanted_packages', "bash", str(script)],
        capture_output=True,
        text=True,
        check=True,
    )
    wanted = {line.split("=")[0] for line in done.stdout.split()}
    assert {"docker.io", "docker-cli", "docker-buildx", "cosign", "skopeo", "mmdebstrap", "dpkg-dev"} <= wanted
    fixtures_wanted = wanted & {"docker-registry", "apache2-utils", "chromium", "chromium-driver"}
    assert fixtures_wanted == (
        {"docker-registry", "apache2-utils", "chromium", "chromium-driver"} if fixtures else set()
    )


def test_the_engine_script_refuses_an_unknown_argument_and_names_the_allowed_ones() -> None:
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    done = subprocess.run(["bash", str(script), "--fixture"], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "unknown argument '--fixture'" in done.stderr and "[--fixtures]" in done.stderr


# engine.sh's functions with the ones that touch the host (apt, root, dockerd) replaced by stand-ins that say what
# they were asked; `docker` answers as an engine with buildx does.
STAND_INS = """
apt_install() { echo "apt-get install $*"; }
need_root() { echo "needs root: $1"; }
engine_answers() { return 0; }
docker() { :; }
warn_if_not_reproducible() { :; }
pgrep() { return 1; }
getent() { return 0; }
start_dockerd() { echo "dockerd started"; }
"""


def engine_script_beside_an_engine(tmp_path: Path, call: str, *, cosign: bool, fixtures: int) -> tuple[str, Path]:
    """Run `call` (main or own) where dockerd and buildx are there already, on a PATH that holds cosign only when
    `cosign` and on which no fixture package is installed; what it printed, and the apt folder it may write."""
    bin_dir, apt = tmp_path / "bin", tmp_path / "apt"
    bin_dir.mkdir()
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "preferences.d").mkdir()
    for tool in ("mkdir", "touch", "chmod", "head", "cat", "paste", "sed", "awk"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    for tool in ("dockerd", "dpkg-query", *(["cosign"] if cosign else [])):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 1\n" if tool == "dpkg-query" else "#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    program = f'source "$1" && FIXTURES={fixtures} && {STAND_INS} {call}'
    done = subprocess.run(
        [shutil.which("bash") or "bash", "-c", program, "bash", str(script)],
        env={"PATH": str(bin_dir), "APT_DIR": str(apt), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, apt


@pytest.mark.parametrize("call", ["main http://mirror.example/debian", "own {dir} http://mirror.example/debian"])
@pytest.mark.parametrize(("cosign", "fixtures"), [(False, 0), (False, 1), (True, 0), (True, 1)])
def test_beside_an_engine_that_is_there_only_cosign_and_the_asked_fixtures_are_installed(
    tmp_path: Path, call: str, cosign: bool, fixtures: int
) -> None:
    """`main` where an engine answers (the host may run another Docker) and `--own` where dockerd and buildx are
    installed: never an engine package; cosign from trixie when none is on PATH, in the same apt-get as the
    fixtures."""
    said, apt = engine_script_beside_an_engine(
        tmp_path, call.format(dir=tmp_path / "engine"), cosign=cosign, fixtures=fixtures
    )
    installs = [line.split()[2:] for line in said.splitlines() if line.startswith("apt-get install ")]
    fixture_packages = "docker-registry apache2-utils openssl chromium chromium-driver fonts-dejavu-core".split()
    expected = ([] if cosign else ["cosign"]) + (fixture_packages if fixtures else [])
    assert installs == ([expected] if expected else [])
    assert f"needs root: installing {' '.join(expected)}" in said if expected else "needs root: installing" not in said
    pin = apt / "preferences.d/dlimages-trixie"
    assert pin.exists() == (not cosign)  # the trixie source is written only when something comes from it
    if not cosign:
        assert "URIs: http://mirror.example/debian\n" in (apt / "sources.list.d/dlimages-trixie.sources").read_text()


def test_the_trixie_pin_lets_only_the_engine_and_cosign_come_from_trixie(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "preferences.d").mkdir()
    script = Path(__file__).resolve().parents[3] / ENGINE_SCRIPT
    subprocess.run(
        ["bash", "-c", 'source "$1" && write_trixie_source http://mirror.example/debian', "bash", str(script)],
        env={**os.environ, "APT_DIR": str(tmp_path)},
        capture_output=True,
        check=True,
    )
    stanzas = [
        dict(line.split(": ", 1) for line in stanza.splitlines() if not line.startswith("#"))
        for stanza in (tmp_path / "preferences.d/dlimages-trixie").read_text().split("\n\n")
    ]
    assert stanzas == [
        {"Package": "*", "Pin": "release n=trixie", "Pin-Priority": "1"},
        {"Package": "docker.io docker-cli docker-buildx cosign", "Pin": "release n=trixie", "Pin-Priority": "990"},
    ]
