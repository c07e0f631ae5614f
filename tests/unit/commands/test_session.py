"""The engine as a task meets it (commands.session.engine): a task the engine cannot serve stops with exit 2 and the
one message before it has done anything; on an engine that differs, a task that can work goes on and says so once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_engines import DOCKER, PODMAN, ROOTLESS, EngineHost

from dlimages.commands import bases, session
from dlimages.commands.session import Failed
from dlimages.core.engines import Need
from dlimages.core.runner import Runner
from dlimages.generate.project import Project

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineHost]:
    """The engine every task of the test meets: the case the test is parametrized with (`indirect`)."""
    engine = EngineHost(request.param)
    monkeypatch.setattr(session, "RUNNER", Runner(engine.run))
    session._note_once.cache_clear()
    yield engine
    session._note_once.cache_clear()


@pytest.mark.parametrize("host", [PODMAN], indirect=True)
def test_base_on_podman_stops_with_exit_2_before_it_fetches_anything(host: EngineHost) -> None:
    with pytest.raises(Failed) as raised:
        bases.base(Project(REPO))
    assert raised.value.code == 2
    assert raised.value.message.startswith("error: Podman 5.4.2 answers as the Docker engine")
    assert [argv[1] for argv in host.calls] == ["info", "version"]  # nothing but the two questions


@pytest.mark.parametrize("host", [PODMAN], indirect=True)
def test_a_task_podman_can_serve_goes_on_after_the_note(host: EngineHost, capsys: pytest.CaptureFixture[str]) -> None:
    session.engine(REPO, True, need=Need.DOCKER)
    out, err = capsys.readouterr()
    assert out == ""  # stdout is the task's result, which a script may read
    assert err.startswith("note: Podman 5.4.2 answers as the Docker engine") and err.count("\n") == 1


@pytest.mark.parametrize("host", [ROOTLESS], indirect=True)
def test_the_note_is_said_once_however_often_the_task_asks(
    host: EngineHost, capsys: pytest.CaptureFixture[str]
) -> None:
    """A build that makes its base first asks for the engine twice."""
    session.engine(REPO, True)
    session.engine(REPO, True, need=Need.BASE)
    err = capsys.readouterr().err
    assert err.startswith("note: rootless Docker 27.5.1:") and err.count("\n") == 1


@pytest.mark.parametrize("host", [DOCKER], indirect=True)
def test_a_standard_docker_says_nothing(host: EngineHost, capsys: pytest.CaptureFixture[str]) -> None:
    for need in Need:
        session.engine(REPO, True, need=need)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("host", [None], indirect=True)
def test_no_engine_is_still_exit_1_with_what_to_do(host: EngineHost) -> None:
    with pytest.raises(Failed) as raised:
        session.engine(REPO, True)
    assert raised.value.code == 1
    assert "the Docker engine is not reachable" in raised.value.message
    assert "not starting one (DLIMAGES_NO_ENGINE_SETUP or --no-engine-setup)" in raised.value.message
