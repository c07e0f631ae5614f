"""What the image tests that drive the engine share: the engine they need, and a free port for a registry.

Without an engine such a test fails, so that a broken CI host is not mistaken for a green one;
DLIMAGES_NO_DOCKER=1 turns that into a skip, for hosts that have no Docker on purpose.
"""

from __future__ import annotations

import os
import socket

import pytest

from dlimages.core.engines import Need
from dlimages.core.runner import DEFAULT as RUNNER

NO_DOCKER_ENV = "DLIMAGES_NO_DOCKER"


def require_engine(*, buildx: bool = True) -> None:
    """Skip under DLIMAGES_NO_DOCKER=1; fail, saying what is wrong, when no engine (or no buildx) answers."""
    if os.environ.get(NO_DOCKER_ENV) == "1":
        pytest.skip(f"{NO_DOCKER_ENV}=1: no Docker engine on this host")
    found = RUNNER.engine()
    problem = found if isinstance(found, str) else found.refusal(Need.BUILDKIT if buildx else Need.DOCKER)
    if problem:
        pytest.fail(f"{problem}; or set {NO_DOCKER_ENV}=1 to skip the image tests", pytrace=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
