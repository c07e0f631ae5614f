"""baselock.py against a real registry on 127.0.0.1 (.ci/registry.sh) and the real skopeo: the digest it records is
the one `docker push` printed and the registry serves (also for a manifest with CRLF, which text capture would
change), a moved tag is followed by a refresh while a build from the old lock still gets the old image, a missing
tag or a registry that is down keeps what the lock had, and a registry that never answers is reported in time.

Needs the Docker engine with buildx, skopeo and docker-registry (`bash scripts/engine.sh --fixtures`), no base image:
the test images are built FROM scratch. Without an engine these tests fail, so a broken CI host is not mistaken for a
green one; DLIMAGES_NO_DOCKER=1 turns that into a skip.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
from support import free_port, require_engine

from dlimages.artifacts.baseslock import BaseLock
from dlimages.building.basesource import BaseSource, choose
from dlimages.core.registry import resolve_digest, skopeo_argv
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result
from dlimages.generate.baselock import refresh
from dlimages.generate.baserequire import Requirement, read_requirement
from dlimages.generate.project import Project

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json"
)
_PUSHED = re.compile(r"^\S+: digest: (?P<digest>sha256:[0-9a-f]{64}) size: \d+$", re.MULTILINE)


class Push(Protocol):
    def __call__(self, ref: str, text: str = "", env: str = "") -> str: ...


def docker(*args: str, check: bool = True) -> Result:
    done = RUNNER.docker(*args, timeout=300)
    if check and not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip() or done.out.strip()}", pytrace=False)
    return done


@pytest.fixture(scope="module")
def engine() -> None:
    """The engine with buildx, and skopeo; fails (not skips) without them unless DLIMAGES_NO_DOCKER=1."""
    require_engine()
    if shutil.which("skopeo") is None:
        pytest.fail("skopeo is not installed: `bash scripts/engine.sh` installs it", pytrace=False)


@pytest.fixture(scope="module")
def registry(engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An open registry on a free port (its address); stopped, and its storage removed, at the end."""
    env = {**os.environ, "REGISTRY_STATE_DIR": str(tmp_path_factory.mktemp("registries"))}
    name, port = f"pytest-{os.getpid()}-baselock", free_port()
    done = RUNNER([str(REGISTRY_SH), "start", name, str(port)], env=env)
    try:
        if not done.ok:
            pytest.fail(f"registry.sh start {name} failed:\n{done.out}{done.err}", pytrace=False)
        yield f"127.0.0.1:{port}"
    finally:
        RUNNER([str(REGISTRY_SH), "stop", name], env=env)


@pytest.fixture
def push(registry: str, tmp_path: Path) -> Iterator[Push]:
    """Build a tiny image (FROM scratch, one file with the given text), push it as `ref`, return the digest `docker
    push` printed (checked against RepoDigests). Every image built is removed at the end, by ID."""
    built: list[str] = []

    def _push(ref: str, text: str = "", env: str = "") -> str:
        context = tmp_path / f"context-{len(built)}"
        context.mkdir()
        dockerfile = "FROM scratch\n" + (f"ENV {env}\n" if env else "") + "COPY hello /hello\n"
        (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        (context / "hello").write_text(text or uuid.uuid4().hex, encoding="utf-8")  # unique: our own image ID
        iid = context / "iid"
        docker("buildx", "build", "--load", "--provenance=false", "--iidfile", str(iid), "-t", ref, str(context))
        built.append(iid.read_text(encoding="utf-8").strip())
        pushed = _PUSHED.search(docker("push", ref).out)
        assert pushed, "docker push printed no digest"
        repo_digest = docker("image", "inspect", "--format", "{{index .RepoDigests 0}}", ref).out.strip()
        assert repo_digest == f"{ref.rsplit(':', 1)[0]}@{pushed['digest']}"
        return pushed["digest"]

    yield _push
    for image in built:
        docker("rmi", "-f", image, check=False)


def served_digest(registry: str, ref: str) -> str:
    """The sha256 of the manifest bytes the registry serves for the tag, read over HTTP without skopeo or docker."""
    repository, tag = ref.removeprefix(f"{registry}/").rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - a fixed http URL on 127.0.0.1
        return "sha256:" + hashlib.sha256(response.read()).hexdigest()


def test_resolved_digest_is_the_pushed_one_and_refresh_records_it(registry: str, push: Push, tmp_path: Path) -> None:
    ref = f"{registry}/ubuntu:22.04"
    pushed = push(ref)
    resolved = resolve_digest(ref, RUNNER)  # plain HTTP on loopback: --tls-verify=false without being asked
    assert resolved.problem is None and resolved.digest == pushed == served_digest(registry, ref)

    path = tmp_path / "bases.lock.json"
    lock, results = refresh(BaseLock.load(path), [ref], RUNNER)
    assert results == [resolved]
    lock.write(path)
    assert BaseLock.load(path).pinned(ref) == f"{ref}@{pushed}"
    assert f'"{ref}": "{pushed}"' in path.read_text(encoding="ascii")


def test_a_moved_tag_is_followed_by_refresh_and_the_old_lock_still_builds_the_old_image(
    registry: str, push: Push, tmp_path: Path
) -> None:
    ref = f"{registry}/nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"
    first = push(ref, "first")
    old, _ = refresh(BaseLock(), [ref], RUNNER)
    second = push(ref, "second")  # NVIDIA rebuilt the tag
    assert second != first

    # What a build of a cell on this base starts FROM, with the lock from before the rebuild: the first image.
    cell = dataclasses.replace(Project(REPO).expansion.cells[0], base_image=ref, bootstrap_base=False)
    chosen = choose(cell, BaseSource(), old)
    base = chosen.build_arg
    assert (base, chosen.note) == (f"{ref}@{first}", None)
    context, out = tmp_path / "context", tmp_path / "out"
    context.mkdir()
    (context / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", encoding="utf-8")
    argv = ["buildx", "build", "--pull", "--build-arg", f"BASE_IMAGE={base}", "--output", f"type=local,dest={out}"]
    docker(*argv, str(context))
    assert (out / "hello").read_text(encoding="utf-8") == "first"

    # A refresh follows the tag; a tag that is gone, and a registry that is down, keep what the lock had.
    gone, down = f"{registry}/ubuntu:18.04", f"127.0.0.1:{free_port()}/ubuntu:20.04"
    lock = BaseLock({**old.digests, gone: first, down: first})
    new, results = refresh(lock, [ref, gone, down], RUNNER)
    assert [result.digest for result in results] == [second, None, None]
    assert results[1].problem is not None
    assert results[1].problem.startswith("the registry does not have this tag (deleted, or never pushed) (skopeo: ")
    assert "manifest unknown" in results[1].problem
    assert results[2].problem is not None
    assert results[2].problem.startswith("the registry is not reachable (skopeo: ")
    assert "connection refused" in results[2].problem
    assert dict(new.digests) == {ref: second, gone: first, down: first}
    assert choose(cell, BaseSource(), new).build_arg == f"{ref}@{second}"


def oci_layout(root: Path, manifest_text: str) -> None:
    """An OCI image layout holding one image (one small layer) whose manifest is exactly `manifest_text` with the
    config and layer descriptors filled in, under the name "crlf"."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f'"digest": "sha256:{digest}", "size": {len(data)}'

    layer = blob(b"\0" * 1024)  # an empty tar archive
    config = blob(json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode())
    manifest = manifest_text.replace("CONFIG", config).replace("LAYER", layer).encode()
    (root / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
                        "size": len(manifest),
                        "annotations": {"org.opencontainers.image.ref.name": "crlf"},
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    blob(manifest)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}', encoding="utf-8")


def test_the_digest_is_that_of_the_bytes_served_even_where_text_capture_would_change_them(
    registry: str, tmp_path: Path
) -> None:
    """Why resolve_digest lets skopeo hash: the Runner captures text, and text turns this manifest's CRLF into LF."""
    oci_layout(
        tmp_path / "layout",
        '{\r\n  "schemaVersion": 2,\r\n  "mediaType": "application/vnd.oci.image.manifest.v1+json",\r\n'
        '  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", CONFIG},\r\n'
        '  "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", LAYER}]\r\n}\r\n',
    )
    ref = f"{registry}/crlf/ubuntu:22.04"
    layout = f"oci:{tmp_path / 'layout'}:crlf"
    copy = RUNNER(
        ["skopeo", "copy", "--preserve-digests", "--dest-tls-verify=false", layout, f"docker://{ref}"], timeout=120
    )
    assert copy.ok, copy.err
    served = served_digest(registry, ref)
    assert resolve_digest(ref, RUNNER).digest == served
    raw = RUNNER(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"])
    assert raw.ok and "sha256:" + hashlib.sha256(raw.out.encode()).hexdigest() != served  # what --raw would give


def test_a_registry_that_never_answers_is_reported_within_the_timeout(engine: None) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connections queue, nothing ever answers
        ref = f"127.0.0.1:{silent.getsockname()[1]}/ubuntu:22.04"
        assert skopeo_argv(ref, timeout=2)[5:7] == ["--command-timeout", "2s"]
        resolved = resolve_digest(ref, RUNNER, timeout=2)
    assert resolved.problem is not None
    assert resolved.problem.startswith("the registry did not answer within 2 s (skopeo: "), resolved.problem


def test_a_bases_own_nvidia_require_cuda_is_read_from_its_config_by_digest(registry: str, push: Push) -> None:
    """What `invoke bases --lock` compares with matrix.yaml's record (generate/baserequire)."""
    ref = f"{registry}/nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"
    value = "cuda>=11.8 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471"
    digest = push(ref, env=f'NVIDIA_REQUIRE_CUDA="{value}"')
    assert read_requirement(f"{ref}@{digest}", RUNNER) == Requirement(f"{ref}@{digest}", value=value)
    plain = push(ref)  # the tag moves to an image without the variable; the digest still names the first
    assert read_requirement(f"{ref}@{plain}", RUNNER) == Requirement(f"{ref}@{plain}", value=None)
    assert read_requirement(f"{ref}@{digest}", RUNNER).value == value
    missing = read_requirement(f"{registry}/nvidia/cuda@sha256:{'0' * 64}", RUNNER)
    assert missing.value is None and (missing.problem or "").startswith("skopeo could not read its config: ")
