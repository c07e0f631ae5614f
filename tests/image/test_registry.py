"""push.py against real registries on 127.0.0.1 (.ci/registry.sh): open, with basic auth, and one that is down.

Needs the Docker engine and `dlimages/base:debian12` (scripts/make-base.sh). Without an engine these tests fail,
so a broken CI host is not mistaken for a green one; DLIMAGES_NO_DOCKER=1 turns that into a skip. Credentials
go to a throwaway DOCKER_CONFIG, never to the user's ~/.docker/config.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import time
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlimages.push import PushError, push_image
from dlimages.references import registry_ref
from dlimages.report import image_manifest, write_report
from dlimages.runner import DEFAULT as RUNNER
from dlimages.runner import Result

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
BASE = "dlimages/base:debian12"
REF = f"lab/test-push:ci-{os.getpid()}"  # per run, so concurrent runs on one engine do not share tags
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"

StartRegistry = Callable[..., str]


def docker(*args: str, stdin: str | None = None, check: bool = True) -> Result:
    done = RUNNER.docker(*args, stdin=stdin, timeout=300)
    if check and not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip()}", pytrace=False)
    return done


def image_id(ref: str) -> str | None:
    return RUNNER.image_id(ref)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A reachable engine with its own client config; fails (not skips) without one unless DLIMAGES_NO_DOCKER=1."""
    if os.environ.get("DLIMAGES_NO_DOCKER") == "1":
        pytest.skip("DLIMAGES_NO_DOCKER=1: no Docker engine on this host")
    problem = RUNNER.engine_problem(buildx=False)
    if problem:
        pytest.fail(f"{problem}; or set DLIMAGES_NO_DOCKER=1 to skip the image tests", pytrace=False)
    if image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: build it with scripts/make-base.sh", pytrace=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_CONFIG", str(tmp_path_factory.mktemp("docker-config")))
        yield


@pytest.fixture(scope="module")
def local_image(engine: None) -> Iterator[str]:
    """REF tagged on the base image: what `invoke build` would leave behind. Only the tag is removed afterwards."""
    docker("tag", BASE, REF)
    yield REF
    docker("rmi", "--no-prune", REF, check=False)


@pytest.fixture(scope="module")
def start_registry(engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartRegistry]:
    """Start registries on free ports; every one is stopped (and its storage removed) at the end."""
    env = {**os.environ, "REGISTRY_STATE_DIR": str(tmp_path_factory.mktemp("registries"))}
    names: list[str] = []

    def start(kind: str, *options: str) -> str:
        name, port = f"pytest-{os.getpid()}-{kind}", free_port()
        names.append(name)
        done = RUNNER([str(REGISTRY_SH), "start", name, str(port), *options], env=env)
        if not done.ok:
            pytest.fail(f"registry.sh start {name} failed:\n{done.out}{done.err}", pytrace=False)
        return f"127.0.0.1:{port}"

    yield start
    for name in names:
        RUNNER([str(REGISTRY_SH), "stop", name], env=env)


def served_manifest(registry: str, repository: str, digest: str, auth: tuple[str, str] | None = None) -> bytes:
    """The manifest bytes the registry serves for `digest`, read over HTTP without the Docker engine."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{digest}", headers={"Accept": MANIFEST_TYPES}
    )
    if auth:
        request.add_header("Authorization", "Basic " + b64encode(":".join(auth).encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        body: bytes = response.read()
        return body


def assert_published(registry: str, ref: str, digest: str | None, auth: tuple[str, str] | None = None) -> None:
    """Independent of push.py's own pull-back: the registry serves bytes hashing to `digest`, naming our config."""
    assert digest is not None
    body = served_manifest(registry, ref.split(":")[0], digest, auth)
    assert "sha256:" + hashlib.sha256(body).hexdigest() == digest
    assert json.loads(body)["config"]["digest"] == image_id(ref)


def assert_local_state_intact(ref: str, registry: str, local_id: str | None) -> None:
    assert image_id(ref) == local_id
    assert image_id(registry_ref(registry, ref)) is None, "the temporary registry tag was left behind"


def test_push_to_open_registry_is_verified(local_image: str, start_registry: StartRegistry) -> None:
    registry = start_registry("open")
    before = image_id(local_image)
    (result,) = push_image([local_image], [registry])
    assert result.ok and result.verified and result.attempts == 1 and result.error is None
    assert result.remote_ref == f"{registry}/{local_image}"
    assert_published(registry, local_image, result.digest)
    assert_local_state_intact(local_image, registry, before)
    print(f"\nopen registry: push {result.push_seconds:.2f} s, pull-back {result.verify_seconds:.2f} s")

    (again,) = push_image([local_image], [registry])  # layers already there: same digest, still verified
    assert again.ok and again.digest == result.digest


def test_auth_registry_needs_login_then_pushes(local_image: str, start_registry: StartRegistry) -> None:
    user, password = "ci", secrets.token_urlsafe(16)
    registry = start_registry("auth", "--auth", f"{user}:{password}")
    before = image_id(local_image)

    with pytest.raises(PushError) as caught:
        push_image([local_image], [registry], backoff=0.1)
    (refused,) = caught.value.results
    expected = (
        f"{registry} refused the credentials for {local_image}: run `docker login {registry}` (or check --registry)"
    )
    assert refused.error == expected and expected in str(caught.value)
    assert refused.attempts == 1 and not refused.verified
    assert_local_state_intact(local_image, registry, before)

    docker("login", registry, "-u", user, "--password-stdin", stdin=password)
    try:
        (result,) = push_image([local_image], [registry])
        assert result.ok and result.attempts == 1
        assert_published(registry, local_image, result.digest, (user, password))
        assert_local_state_intact(local_image, registry, before)
        print(f"\nauth registry: push {result.push_seconds:.2f} s, pull-back {result.verify_seconds:.2f} s")
    finally:
        docker("logout", registry, check=False)


def test_registry_that_is_down_fails_after_retries(local_image: str, engine: None) -> None:
    registry = f"127.0.0.1:{free_port()}"  # nothing listens there
    before = image_id(local_image)
    started = time.monotonic()
    with pytest.raises(PushError) as caught:
        push_image([local_image], [registry], retries=2, backoff=0.1)
    elapsed = time.monotonic() - started
    (result,) = caught.value.results
    assert result.attempts == 3 and result.digest is None and not result.verified
    assert result.error is not None
    assert result.error.startswith(f"{registry} is not reachable (")
    assert "connection refused" in result.error
    assert result.error.endswith("): is it running? nothing local was changed")
    assert 0.3 <= elapsed < 30  # slept 0.1 + 0.2 between the three attempts
    assert_local_state_intact(local_image, registry, before)


def test_manifest_and_report_of_a_real_image(local_image: str, tmp_path: Path) -> None:
    manifest = image_manifest(local_image, python=None)  # the base image has no Python
    assert manifest["id"] == image_id(local_image)
    assert manifest["size"] > 10_000_000
    assert manifest["pip"] is None
    assert manifest["dpkg"]["bash"] and manifest["dpkg"]["dpkg"]
    path = tmp_path / "report.json"
    write_report(path, [manifest])
    assert json.loads(path.read_text(encoding="utf-8")) == [manifest]
