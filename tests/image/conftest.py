"""Image tests: choose the image(s) under test, run each in a container that always goes away, read its labels.

`pytest tests/image --image REF` (repeatable, or DLIMAGES_TEST_IMAGES="REF REF") parametrizes every test over
the images; without one, every test is reported SKIPPED ("no --image given"), never passed. Commands reach a
container through pytest-testinfra's docker backend, each under a timeout both inside the container and here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra.host
from testinfra.backend.base import CommandResult
from testinfra.backend.docker import DockerBackend

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result

IMAGES_ENV = "DLIMAGES_TEST_IMAGES"
NO_IMAGE = "no --image given"
EXEC_TIMEOUT_S = 120  # the slowest exec imports a framework and every package on a 2-core machine
DOCKER_TIMEOUT_S = 120  # `docker run`/`rm`/`inspect` on a busy engine
CELL_FILE = "/etc/dlimages/cell.json"
LABEL_PREFIX = "io.dlimages."
ARTIFACTS_ENV = "DLIMAGES_TEST_ARTIFACTS"
ARTIFACTS_DEFAULT = ".work/test-artifacts"  # under the rootdir; .work/ is git-ignored


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--image",
        action="append",
        default=[],
        metavar="REF",
        help=f"a built image to test, e.g. lab/pytorch-universal-dev:v1.0-...; repeatable (or ${IMAGES_ENV})",
    )
    parser.addoption(
        "--artifacts-dir",
        default=None,
        metavar="DIR",
        help=f"where tests save what a person looks at afterwards (screenshots); default ${ARTIFACTS_ENV}, "
        f"else {ARTIFACTS_DEFAULT}/ under the rootdir",
    )


def images_under_test(config: pytest.Config) -> list[str]:
    """--image values first, then $DLIMAGES_TEST_IMAGES (space separated), each once, in order."""
    refs = [*config.getoption("--image"), *os.environ.get(IMAGES_ENV, "").split()]
    return list(dict.fromkeys(ref for ref in refs if ref.strip()))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "image_ref" not in metafunc.fixturenames:
        return
    refs = images_under_test(metafunc.config)
    if refs:
        metafunc.parametrize("image_ref", refs, indirect=True, scope="session", ids=refs)
    else:
        # A parameter that is skipped before any fixture runs: no Docker needed to report the skip.
        skipped = pytest.param(None, marks=pytest.mark.skip(reason=NO_IMAGE), id="no-image")
        metafunc.parametrize("image_ref", [skipped], indirect=True, scope="session")


# ---------------------------------------------------------------------------------------------
# Docker on this machine, always bounded in time.
# ---------------------------------------------------------------------------------------------


def docker(*args: str, timeout: float = DOCKER_TIMEOUT_S, check: bool = True, stdin: str | None = None) -> Result:
    """`docker ARGS` here; a hang fails the test instead of the session, a non-zero exit fails it with stderr."""
    result = RUNNER.docker(*args, timeout=timeout, stdin=stdin)
    if result.missing:
        pytest.fail("the docker CLI is not installed; the image tests need a Docker engine", pytrace=False)
    if result.hung:
        pytest.fail(f"`{shlex.join(result.argv)}` took more than {timeout:.0f} s", pytrace=False)
    if check and not result.ok:
        pytest.fail(f"`{shlex.join(result.argv)}` exited {result.code}: {result.err.strip()}", pytrace=False)
    return result


def unique_name(purpose: str) -> str:
    return f"dlimages-test-{purpose}-{uuid.uuid4().hex[:10]}"


def remove_container(name: str) -> None:
    """Best effort, for teardown: a container that is already gone is fine."""
    RUNNER.docker("rm", "-f", "-v", name, timeout=DOCKER_TIMEOUT_S)


class TimedDockerBackend(DockerBackend):
    """testinfra's docker backend with every exec bounded: coreutils `timeout` inside, a subprocess timeout here."""

    def __init__(self, name: str, timeout: float = EXEC_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.timeout = timeout

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        timeout = float(kwargs.pop("timeout", self.timeout))
        cmd = self.get_command(command, *args)
        user = ["-u", self.user] if self.user is not None else []
        argv = ["exec", *user, self.name, "timeout", "-k", "5", f"{timeout:.0f}", "/bin/sh", "-c", cmd]
        done = RUNNER.docker(*argv, timeout=timeout + 15)
        if done.hung:
            pytest.fail(f"exec in {self.name} hung past {timeout:.0f} s: {cmd}", pytrace=False)
        if done.code == 124:
            pytest.fail(f"exec in {self.name} took more than {timeout:.0f} s: {cmd}", pytrace=False)
        return self.result(done.code, self.encode(cmd), done.out.encode(), done.err.encode())


class Docker:
    """What the tests do with Docker, handed to them as the `docker` fixture (test modules import nothing
    from here: a second conftest.py elsewhere under tests/ would make `from conftest import` ambiguous)."""

    def __call__(
        self, *args: str, timeout: float = DOCKER_TIMEOUT_S, check: bool = True, stdin: str | None = None
    ) -> Result:
        return docker(*args, timeout=timeout, check=check, stdin=stdin)

    @contextlib.contextmanager
    def started(self, image: str, *command: str, options: tuple[str, ...] = (), purpose: str = "run") -> Iterator[str]:
        """`docker run -d` the image (its default CMD without a command); yields the name, always removes it."""
        name = unique_name(purpose)
        try:
            docker("run", "-d", "--name", name, *options, image, *command)
            yield name
        finally:
            remove_container(name)

    def run_once(
        self, image: str, *command: str, options: tuple[str, ...] = (), timeout: float = EXEC_TIMEOUT_S
    ) -> Result:
        """`docker run --rm` in the foreground, through the image's entrypoint; a run over time is removed."""
        name = unique_name("once")
        try:
            return docker("run", "--rm", "--name", name, *options, image, *command, timeout=timeout, check=False)
        finally:
            remove_container(name)

    def host(self, name: str, user: str | None = None) -> testinfra.host.Host:
        """A testinfra host for a running container, as its default user or as `user`."""
        backend = TimedDockerBackend(f"{user}@{name}" if user else name)
        host = testinfra.host.Host(backend)
        backend.set_host(host)
        return host


# ---------------------------------------------------------------------------------------------
# The image under test and its running container.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """An image as `docker image inspect` shows it: the reference tested, its labels and config."""

    ref: str
    labels: dict[str, str]
    config: dict[str, Any]
    created: str = ""  # RFC 3339; SOURCE_DATE_EPOCH for a reproducible build

    def label(self, key: str, prefix: str = LABEL_PREFIX) -> str:
        """The io.dlimages.<key> label (or <prefix><key>); an image without it fails the test that needs it."""
        name = prefix + key
        if name not in self.labels:
            pytest.fail(f"{self.ref} has no label {name}: was it built from a dlimages Dockerfile?", pytrace=False)
        return self.labels[name]


@dataclass(frozen=True)
class Container:
    """A running container: `host` execs as the image's default user, `root` as uid 0 (for whole-disk scans)."""

    name: str
    image: Image
    host: testinfra.host.Host
    root: testinfra.host.Host

    def python_json(self, script: str, timeout: float = EXEC_TIMEOUT_S) -> Any:
        """Run a script with the image's venv Python as the default user; its last stdout line is JSON."""
        out = self.host.run("/opt/venv/bin/python -c %s", script, timeout=timeout)
        assert out.rc == 0, f"python exited {out.rc}:\n{out.stderr[-3000:]}"
        return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def image_ref(request: pytest.FixtureRequest) -> str:
    ref = request.param
    assert isinstance(ref, str)
    return ref


@pytest.fixture(scope="session", name="docker")
def docker_fixture() -> Docker:
    return Docker()


@pytest.fixture(scope="session")
def image(image_ref: str) -> Image:
    found = docker("image", "inspect", image_ref, check=False)
    if not found.ok:
        pytest.fail(
            f"image {image_ref} is not on this Docker engine ({found.err.strip()}); build it first, "
            "e.g. `invoke build --cuda 12.1 --torch 2.1 --python 3.11`",
            pytrace=False,
        )
    inspected = json.loads(found.out)[0]
    config = inspected.get("Config") or {}
    return Image(image_ref, dict(config.get("Labels") or {}), config, str(inspected.get("Created") or ""))


@pytest.fixture(scope="session")
def container(image: Image, docker: Docker) -> Iterator[Container]:
    """One container per image for read-only checks; `sleep infinity` replaces the default CMD (JupyterLab)."""
    with docker.started(image.ref, "sleep", "infinity", purpose="exec") as name:
        yield Container(name, image, docker.host(name), docker.host(name, "0"))


@pytest.fixture(scope="session")
def cell(container: Container) -> dict[str, Any]:
    """The renderer's record of the cell, as shipped in the image."""
    text = container.host.check_output("cat %s", CELL_FILE)
    data = json.loads(text)
    assert isinstance(data, dict), f"{CELL_FILE} is not a JSON object"
    return data


@pytest.fixture(scope="session")
def artifacts_dir(request: pytest.FixtureRequest) -> Path:
    """--artifacts-dir, else $DLIMAGES_TEST_ARTIFACTS, else .work/test-artifacts under the rootdir; created."""
    chosen = request.config.getoption("--artifacts-dir") or os.environ.get(ARTIFACTS_ENV, "").strip()
    path = Path(chosen) if chosen else request.config.rootpath / ARTIFACTS_DEFAULT
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()
