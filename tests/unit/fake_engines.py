"""Engines that answer as Docker, from what their `docker version` and `docker info` printed (`--format '{{json .}}'`),
kept under core/engines/<case>/ (version.json, info.json; how each was made: core/engines/README.md).

`EngineHost(case)` is a host whose `docker` answers as that engine, to hand to the code under test as
`Runner(host.run)`; with no case, no engine answers (`docker info` fails as it does without a daemon).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

CASES = Path(__file__).parent / "core" / "engines"
DOCKER = "docker"  # Docker 26.1.5 with buildx, as CI runs it
PODMAN = "podman-socket"  # the docker CLI on Podman 5.4.2's Docker API socket (rootless)
PODMAN_DOCKER = "podman-docker"  # podman-docker's `docker`, which is podman itself
ROOTLESS = "docker-rootless"
NO_BUILDX = "docker-no-buildx"
OLD = "docker-20.10"
NOT_RUNNING = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"


def answers(case: str) -> tuple[str, str]:
    """What `docker version` and `docker info` printed, as text."""
    folder = CASES / case
    return (folder / "version.json").read_text(encoding="utf-8"), (folder / "info.json").read_text(encoding="utf-8")


class EngineHost:
    """`docker info` and `docker version` as the engine `case` answers them (every other command fails); each argv
    asked is kept in `calls`."""

    def __init__(self, case: str | None) -> None:
        self.case = case
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(tuple(argv))
        if self.case is None or argv[:2] not in (["docker", "info"], ["docker", "version"]):
            return subprocess.CompletedProcess(argv, 1, "", NOT_RUNNING)
        version, info = answers(self.case)
        return subprocess.CompletedProcess(argv, 0, info if argv[1] == "info" else version, "")
