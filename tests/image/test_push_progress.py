"""`invoke push` shows each push's progress, for real: a small image of five layers (the base, three RUN layers of
a few MB of random bytes, an empty WORKDIR layer) goes to a throwaway registry on 127.0.0.1 (.ci/registry.sh), and
the output counts its layers and their bytes up to N/N with the elapsed time: a line per finished layer in a log,
one line rewritten in place on a terminal (a pseudo-terminal here).

Needs the engine with buildx, docker-registry (`bash scripts/engine.sh --fixtures`) and `dlimages/base:debian12`;
without them this fails, so a broken CI host is not mistaken for a green one. DLIMAGES_NO_DOCKER=1 skips. The image
and the registries made here are removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import free_port, require_engine

from dlimages.core.display import WIDTH
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
BASE = "dlimages/base:debian12"
REF = f"lab-test/push-progress:ci-{os.getpid()}"  # per run: concurrent runs on one engine share no tags
# The last step adds a stand-in for the venv's Python that lists no packages: the build report `invoke push` writes
# lists each image's pip packages.
DOCKERFILE = """\
FROM dlimages/base:debian12
RUN head -c 4000000 /dev/urandom > /a.bin
RUN head -c 3000000 /dev/urandom > /b.bin
WORKDIR /progress
RUN head -c 2000000 /dev/urandom > /c.bin \\
 && mkdir -p /opt/venv/bin && printf '#!/bin/sh\\necho "[]"\\n' > /opt/venv/bin/python && chmod 755 /opt/venv/bin/python
"""
LAYERS = 5
# `push REF -> REGISTRY: 3/5 layers, 81.5/83.5 MB, 2s`, perhaps `(2 already there)`, then `, pushed` at the end
STATUS = re.compile(
    r"^push (?P<ref>\S+) -> (?P<registry>\S+): (?P<done>\d+)/(?P<total>\d+) layers(?: \((?P<there>\d+) already "
    r"there\))?, (?P<bytes_done>\d+\.\d)/(?P<bytes_total>\d+\.\d) MB, (?P<elapsed>\d+s|\d+m\d\ds)(?P<end>, pushed)?$"
)

StartRegistry = Callable[[str], str]


def docker(*args: str, check: bool = True, timeout: float = 300) -> Result:
    done = RUNNER.docker(*args, timeout=timeout)
    if check and not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip() or done.out.strip()}", pytrace=False)
    return done


def push_argv(registry: str, report: Path) -> list[str]:
    return [sys.executable, "-m", "invoke", "push", "--registry", registry, "--image", REF, "--report", str(report)]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """REF built here (fresh random bytes: nothing of it is in any registry yet); removed afterwards."""
    require_engine()
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is missing: `sudo bash scripts/engine.sh --fixtures` installs it", pytrace=False)
    if RUNNER.image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: make it with `invoke base`", pytrace=False)
    context = tmp_path_factory.mktemp("push-progress")
    (context / "Dockerfile").write_text(DOCKERFILE)
    docker("buildx", "build", "--progress=plain", "--load", "--provenance=false", "-t", REF, str(context))
    try:
        yield REF
    finally:
        docker("rmi", REF, check=False)


@pytest.fixture(scope="module")
def start_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartRegistry]:
    """Start registries on free ports; every one is stopped (and its storage removed) at the end."""
    env = {**os.environ, "REGISTRY_STATE_DIR": str(tmp_path_factory.mktemp("registries"))}
    names: list[str] = []

    def start(kind: str) -> str:
        name, port = f"pytest-{os.getpid()}-progress-{kind}", free_port()
        names.append(name)
        done = RUNNER([str(REGISTRY_SH), "start", name, str(port)], env=env)
        if not done.ok:
            pytest.fail(f"registry.sh start {name} failed:\n{done.out}{done.err}", pytrace=False)
        return f"127.0.0.1:{port}"

    yield start
    for name in names:
        RUNNER([str(REGISTRY_SH), "stop", name], env=env)


def image_bytes(ref: str) -> float:
    """The image's uncompressed size in MB, as the progress shows it."""
    return round(int(json.loads(docker("image", "inspect", ref).out)[0]["Size"]) / 1e6, 1)


def test_a_log_gets_a_line_per_finished_layer_up_to_all_of_them(
    image: str, start_registry: StartRegistry, tmp_path: Path
) -> None:
    registry = start_registry("log")
    pushed = subprocess.run(
        [*push_argv(registry, tmp_path / "report.json"), "--no-engine-setup"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    print(f"\n{pushed.stdout}")
    lines = [line for line in pushed.stdout.splitlines() if line.startswith("push ")]
    assert "\r" not in pushed.stdout and "\x1b" not in pushed.stdout  # no terminal: plain lines
    found = [STATUS.match(line) for line in lines]
    assert all(found) and all(len(line) <= WIDTH for line in lines), lines
    statuses = [match for match in found if match]
    assert {(m["ref"], m["registry"], int(m["total"])) for m in statuses} == {(image, registry, LAYERS)}
    assert [int(m["done"]) for m in statuses] == [*range(1, LAYERS + 1), LAYERS]  # a line per layer, then the end
    last = statuses[-1]
    assert last["end"] == ", pushed" and last["bytes_done"] == last["bytes_total"] == str(image_bytes(image))
    assert last["there"] is None  # a new registry: every layer went up
    assert f"pushed {registry}/{image} sha256:" in pushed.stdout

    again = subprocess.run(
        [*push_argv(registry, tmp_path / "report.json"), "--no-engine-setup"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    final = [STATUS.match(line) for line in again.stdout.splitlines() if line.startswith("push ")][-1]
    assert final and final["done"] == final["there"] == str(LAYERS) and final["end"] == ", pushed"


def test_a_terminal_gets_one_line_rewritten_in_place(image: str, start_registry: StartRegistry, tmp_path: Path) -> None:
    registry = start_registry("tty")
    primary, secondary = pty.openpty()
    with subprocess.Popen(
        [*push_argv(registry, tmp_path / "report.json"), "--no-engine-setup"],
        cwd=REPO,
        stdout=secondary,
        stderr=subprocess.PIPE,
        text=True,
    ) as push:
        os.close(secondary)
        chunks: list[bytes] = []
        with contextlib.suppress(OSError):  # EIO once the push has closed its end
            while chunk := os.read(primary, 65536):
                chunks.append(chunk)
        os.close(primary)
        err = push.stderr.read() if push.stderr else ""
        code = push.wait(timeout=300)
    text = b"".join(chunks).decode()
    assert code == 0, text + err
    status_line, *_ = [line.rstrip("\r") for line in text.split("\n") if "\rpush " in line]  # the pty sends \r\n
    drawn = [part.removesuffix("\x1b[K") for part in status_line.split("\r") if part.strip()]
    assert len(drawn) >= LAYERS + 1 and all("\x1b[K" in part for part in status_line.split("\r")[1:])
    statuses = [STATUS.match(part) for part in drawn]
    assert all(statuses) and all(len(part) <= WIDTH for part in drawn), drawn
    done = [int(m["done"]) for m in statuses if m]
    assert done == sorted(done) and done[-1] == LAYERS and statuses[-1] and statuses[-1]["end"] == ", pushed"
    print(f"\nthe terminal's last status line: {drawn[-1]}")
