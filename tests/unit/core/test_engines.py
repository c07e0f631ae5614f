"""core.engines without an engine: which kind of engine the captured `docker version` / `docker info` describe, and
the one message each kind says (one test per message), read through `Runner.engine` as a task reads it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from fake_engines import DOCKER, NO_BUILDX, OLD, PODMAN, PODMAN_DOCKER, ROOTLESS, EngineHost, answers

from dlimages.core.engines import SUPPORT, Engine, Kind, Need, judge, read_engine
from dlimages.core.runner import Runner


def engine_of(case: str) -> Engine:
    found = Runner(EngineHost(case).run).engine()
    assert isinstance(found, Engine), found
    return found


@pytest.mark.parametrize(
    ("case", "kinds", "version"),
    [
        (DOCKER, (), "26.1.5+dfsg1"),
        (PODMAN, (Kind.PODMAN,), "5.4.2"),  # not also rootless, nor older than 23: Podman's own fields
        (PODMAN_DOCKER, (Kind.PODMAN,), "5.4.2"),
        (NO_BUILDX, (Kind.NO_BUILDX,), "26.1.5+dfsg1"),
        (OLD, (Kind.OLD,), "20.10.24+dfsg1"),
        (ROOTLESS, (Kind.ROOTLESS,), "27.5.1"),
    ],
)
def test_each_engine_is_told_by_its_answers(case: str, kinds: tuple[Kind, ...], version: str) -> None:
    assert engine_of(case) == Engine(kinds, version)


def test_the_engine_is_asked_once_with_docker_info_and_once_with_docker_version() -> None:
    host = EngineHost(DOCKER)
    Runner(host.run).engine()
    assert host.calls == [
        ("docker", "info", "--format", "{{json .}}"),
        ("docker", "version", "--format", "{{json .}}"),
    ]


def test_a_standard_docker_with_buildx_serves_every_task_and_says_nothing() -> None:
    found = engine_of(DOCKER)
    assert [found.refusal(need) for need in Need] == [None, None, None]
    assert found.notes() == []


@pytest.mark.parametrize("case", [PODMAN, PODMAN_DOCKER])
def test_podman_refuses_builds_and_the_base_and_says_what_works_there(case: str) -> None:
    found = engine_of(case)
    message = found.refusal(Need.BUILDKIT)
    assert message == found.refusal(Need.BASE) == found.notes()[0]
    assert message.startswith("Podman 5.4.2 answers as the Docker engine, and Podman's Docker API has no BuildKit")
    assert "(containers/podman#17836)" in message
    assert "`invoke build` and `invoke repro` cannot work on it, nor `invoke base`" in message
    assert "`invoke matrix`, `render`, `doctor` and `lock`'s Python locks need no engine" in message
    assert message.endswith("push, verify, smoke, bench, test and disk are not supported on Podman (untested)")
    assert found.refusal(Need.DOCKER) is None  # those go on, the message said first as a note


def test_docker_without_buildx_refuses_builds_only_and_says_how_to_install_it() -> None:
    found = engine_of(NO_BUILDX)
    message = found.refusal(Need.BUILDKIT)
    assert message is not None and message.startswith("the docker buildx plugin is missing")
    assert "`invoke build` and `invoke repro` run `docker buildx build`" in message
    assert "Debian 13: docker-buildx; Docker's apt repository: docker-buildx-plugin" in message
    assert "`scripts/engine.sh` installs it only where no engine answers" in message  # never beside this one
    assert found.refusal(Need.DOCKER) is None and found.refusal(Need.BASE) is None


def test_docker_before_23_builds_but_says_its_builds_are_not_reproducible() -> None:
    found = engine_of(OLD)
    assert [found.refusal(need) for need in Need] == [None, None, None]
    assert found.notes() == [
        "Docker 20.10.24+dfsg1 is older than 23.0, the first whose BuildKit (0.11) honours SOURCE_DATE_EPOCH: "
        "builds on it are untested here and never reproducible (two cold builds never give the same image ID)"
    ]


def test_rootless_docker_serves_every_task_and_says_what_differs() -> None:
    found = engine_of(ROOTLESS)
    assert [found.refusal(need) for need in Need] == [None, None, None]
    [message] = found.notes()
    assert message.startswith("rootless Docker 27.5.1: builds use its BuildKit as on any Docker (untested rootless)")
    assert "`--gpus` (smoke, bench, `docker run`) needs NVIDIA's container toolkit set up for rootless mode" in message
    assert "`invoke base` runs mmdebstrap as root, and root's docker reaches the rootful engine's socket" in message
    assert 'sudo env DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock "$(command -v invoke)" base' in message


def test_an_engine_with_several_kinds_says_each_and_refuses_with_the_first_that_refuses() -> None:
    version, info = (json.loads(text) for text in answers(OLD))
    info["SecurityOptions"].append("name=rootless")
    info["ClientInfo"]["Plugins"] = [{**info["ClientInfo"]["Plugins"][0], "Err": "exec format error"}]  # unusable
    found = judge(version, info)
    assert found.kinds == (Kind.NO_BUILDX, Kind.OLD, Kind.ROOTLESS)
    assert found.refusal(Need.BUILDKIT) == found.notes()[0]
    assert len(found.notes()) == 3 and all("\n" not in line for line in found.notes())


@pytest.mark.parametrize(
    ("version", "info"), [("", ""), ("null", "Cannot connect"), ("[]", "26.1.5"), ("[" * 100_000, "{" * 100_000)]
)
def test_answers_that_cannot_be_read_claim_nothing(version: str, info: str) -> None:
    assert read_engine(version, info) == Engine((), "")


def test_no_message_mentions_an_image_store() -> None:
    assert not any("store" in support.says for support in SUPPORT.values())


def fake_run(outcome: subprocess.CompletedProcess[str] | Exception) -> Any:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert argv[:2] == ["docker", "info"], "no second question when the first got no answer"
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return run


@pytest.mark.parametrize(
    ("outcome", "problem"),
    [
        (FileNotFoundError(), "the docker CLI is not installed"),
        (subprocess.TimeoutExpired("docker", 30), "the Docker engine did not answer within 30 s"),
        (subprocess.CompletedProcess([], 1, "", "Cannot connect"), "the Docker engine is not reachable"),
    ],
)
def test_no_engine_answering_is_said_as_what_keeps_it_from_answering(
    outcome: subprocess.CompletedProcess[str] | Exception, problem: str
) -> None:
    runner = Runner(fake_run(outcome))
    found = runner.engine()
    assert isinstance(found, str) and found.startswith(problem)


@pytest.mark.parametrize(
    ("case", "buildx", "problem"),
    [
        (DOCKER, True, None),
        (PODMAN, True, "Podman 5.4.2 answers as the Docker engine"),
        (PODMAN, False, None),
        (NO_BUILDX, True, "the docker buildx plugin is missing"),
        (NO_BUILDX, False, None),
        (ROOTLESS, True, None),
    ],
)
def test_engine_problem_is_the_refusal_of_builds_or_of_plain_docker_commands(
    case: str, buildx: bool, problem: str | None
) -> None:
    """What the image tests ask before they use the engine (tests/image/support.py)."""
    engine = Runner(EngineHost(case).run).engine()
    assert not isinstance(engine, str), engine
    found = engine.refusal(Need.BUILDKIT if buildx else Need.DOCKER)
    assert found == problem or (found is not None and problem is not None and found.startswith(problem))
