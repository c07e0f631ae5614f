"""push.py against real registries on 127.0.0.1 (.ci/registry.sh): open, with basic auth, one that is down, one
whose immutable tag already holds another image, and one that holds every upload (a push interrupted by a signal).

Needs the Docker engine and `dlimages/base:debian12` (scripts/make-base.sh). Without an engine these tests fail,
so a broken CI host is not mistaken for a green one; DLIMAGES_NO_DOCKER=1 turns that into a skip. Credentials
go to a throwaway DOCKER_CONFIG, never to the user's ~/.docker/config.json.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import free_port, require_engine

from dlimages.core.references import registry_ref
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result
from dlimages.publish.push import PushError, push_image
from dlimages.publish.report import image_manifest, write_report

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


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A reachable engine with its own client config; fails (not skips) without one unless DLIMAGES_NO_DOCKER=1."""
    require_engine(buildx=False)
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


def served_tag(registry: str, ref: str) -> str:
    """The digest of the manifest the registry serves under `ref`'s tag, read over HTTP without the engine."""
    repository, tag = ref.rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return "sha256:" + hashlib.sha256(response.read()).hexdigest()


def test_an_immutable_tag_is_never_overwritten_with_another_image(engine: None, start_registry: StartRegistry) -> None:
    registry = start_registry("immutable")
    ref = f"lab/test-immutable:ci-{os.getpid()}"  # an immutable tag: not a moving tag of any ledger entry
    remote = registry_ref(registry, ref)
    container = f"pytest-{os.getpid()}-another-build"
    another = ""
    docker("tag", BASE, ref)
    try:
        (first,) = push_image([ref], [registry])
        # Another build of the same cell (a different image ID) under the same tag, as after a rebuild.
        docker("create", "--name", container, BASE, "true")
        another = docker("commit", "--change", "LABEL io.dlimages.test=another-build", container).out.strip()
        docker("tag", another, ref)

        with pytest.raises(PushError) as caught:
            push_image([ref], [registry], backoff=0.1)
        (refused,) = caught.value.results
        assert refused.error == (
            f"{remote} is an immutable tag and {registry} already has another image under it: the registry serves "
            f"manifest {first.digest} (image {image_id(BASE)}), {ref} is image {another}; nothing was pushed. "
            "Release it under a new tag, or give --force-overwrite to replace the registry's image"
        )
        assert served_tag(registry, ref) == first.digest  # untouched
        assert image_id(remote) is None  # no temporary tag was made

        # A moving tag (the release tag, an alias) moves; --force-overwrite replaces an immutable one on purpose.
        (moved,) = push_image([ref], [registry], moving={ref})
        assert moved.ok and served_tag(registry, ref) == moved.digest != first.digest
        docker("tag", BASE, ref)
        (forced,) = push_image([ref], [registry], force_overwrite=True)
        assert forced.ok and served_tag(registry, ref) == forced.digest == first.digest
    finally:
        docker("rm", container, check=False)
        docker("tag", BASE, ref, check=False)
        docker("rmi", "--no-prune", ref, check=False)
        if another:
            docker("rmi", "-f", another, check=False)


class HoldingProxy:
    """A TCP proxy in front of a real registry that passes GET requests (the ping, `docker manifest inspect`) and
    holds every other one unanswered: `docker push`'s uploads, so a push stays in flight as long as a test needs."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.held: list[str] = []  # the request lines held, e.g. "HEAD /v2/lab/x/blobs/sha256:... HTTP/1.1"
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        for sock in [self.server, *self._sockets]:
            sock.close()

    def _serve(self) -> None:
        host, port = self.upstream.rsplit(":", 1)
        while not self._closing.is_set():
            try:
                client, _ = self.server.accept()
                upstream = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                return
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = client.recv(65536)
                    if not data:
                        return
                    buffer += data
                    if not buffer[:1].isalpha():  # not HTTP (docker trying TLS first): pass it through
                        upstream.sendall(buffer)
                        return _pipe(client, upstream)
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                if not head.startswith(b"GET "):
                    self.held.append(head.split(b"\r\n", 1)[0].decode())
                    self._closing.wait()
                    return
                upstream.sendall(head + b"\r\n\r\n")  # a GET has no body


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    for sock in (source, target):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_push_removes_the_temporary_tag_and_says_so(
    local_image: str, start_registry: StartRegistry, tmp_path: Path, sent: signal.Signals, code: int
) -> None:
    proxy = HoldingProxy(start_registry(f"held-{sent.name.lower()}"))
    registry, remote, before = proxy.address, registry_ref(proxy.address, local_image), image_id(local_image)
    argv = [sys.executable, "-m", "invoke", "push", "--registry", registry, "--image", local_image]
    # Popen, not the Runner: the test signals the push while it runs (SIGINT to it alone, as `kill -INT` does).
    push = subprocess.Popen(
        [*argv, "--report", str(tmp_path / "report.json")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (proxy.held and image_id(remote)):  # tagged, and its upload is held: the push is in flight
            assert push.poll() is None, f"push ended early ({push.returncode}): {push.communicate()}"
            assert time.monotonic() < deadline, "the push never got to its upload"
            time.sleep(0.1)
        push.send_signal(sent)
        out, err = push.communicate(timeout=120)
        left_behind = image_id(remote)
    finally:
        if push.poll() is None:
            push.kill()
            push.communicate()
        proxy.close()
        docker("rmi", "--no-prune", remote, check=False)  # what an unhandled SIGTERM leaves behind
    assert push.returncode == code, out + err
    assert err.startswith(
        f"error: interrupted by {sent.name} while pushing {local_image} to {registry}: the temporary tag {remote} "
        "was removed, and nothing else local was changed;"
    ), err
    assert "Traceback" not in out + err and not (tmp_path / "report.json").exists()
    assert left_behind is None, "the temporary registry tag was left behind"
    assert image_id(local_image) == before
