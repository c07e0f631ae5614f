"""`invoke push --compression zstd` against the real engine, skopeo and two registries on 127.0.0.1: the registries get
zstd layers, both pushes give the same manifest digest, and the engine the project installs pulls the image back
from nothing and runs it. The layout the push writes from the engine's API stream is the one the CLI's `docker save`
gives.

The image is small: the offline base (`dlimages/base:debian12`) with one layer of its own, whose content is unique to
the run, so the pull has to fetch and decompress it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import free_port, require_engine

from dlimages.core.imagestream import docker_save, engine_socket
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import byte_stream
from dlimages.publish.zstdpush import write_layout

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
BASE = "dlimages/base:debian12"
NAME = f"lab/test-zstd-{os.getpid()}"
REF = f"{NAME}:v1"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def docker(*args: str) -> str:
    done = RUNNER.docker(*args, timeout=600)
    if not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip()}", pytrace=False)
    return done.out.strip()


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    require_engine()
    if RUNNER.image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: make it with `invoke base`", pytrace=False)
    folder = tmp_path_factory.mktemp("zstd")
    env = {**os.environ, "REGISTRY_STATE_DIR": str(folder / "registries")}
    names = []
    for number in (1, 2):
        name, port = f"pytest-{os.getpid()}-zstd{number}", free_port()
        done = RUNNER([str(REGISTRY_SH), "start", name, str(port)], env=env)
        if not done.ok:
            pytest.fail(f"registry.sh start {name} failed:\n{done.out}{done.err}", pytrace=False)
        names.append((name, f"127.0.0.1:{port}"))
    (folder / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo {os.getpid()}-{os.urandom(8).hex()} > /marker\n")
    docker("buildx", "build", "--load", "--provenance=false", "--tag", REF, str(folder))
    yield [address for _, address in names]
    listed = RUNNER.docker("image", "ls", "--format", "{{.Repository}} {{.ID}}").out.split("\n")
    ids = {line.split()[1] for line in listed if line.split() and line.split()[0].endswith(NAME)}
    if ids:
        RUNNER.docker("image", "rm", "--force", *sorted(ids))
    for name, _ in names:
        RUNNER([str(REGISTRY_SH), "stop", name], env=env)


def push(registry: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "push", "--image", REF, "--registry", registry,
         "--compression", "zstd", "--no-sign", "--report", str(tmp_path / "report.json"), "--no-engine-setup"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [digest] = re.findall(rf"^pushed {re.escape(registry)}/{re.escape(REF)} (sha256:[0-9a-f]{{64}})", done.stdout, re.M)
    return digest


def test_zstd_layers_the_same_digest_twice_and_the_engine_pulls_and_runs_them(
    registries: list[str], tmp_path: Path
) -> None:
    digests = [push(registry, tmp_path) for registry in registries]
    assert digests[0] == digests[1], "two pushes of one image with zstd gave two digests"
    request = urllib.request.Request(f"http://{registries[0]}/v2/{NAME}/manifests/{digests[0]}")
    request.add_header("Accept", OCI_MANIFEST)
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (a registry of this test on 127.0.0.1)
        manifest = json.load(answer)
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}
    marker = docker("run", "--rm", "--network", "none", "--entrypoint", "cat", REF, "/marker")
    local_id = docker("image", "inspect", "--format", "{{.Id}}", REF)
    # Nothing of the image's own layer is left in the engine: the pull must fetch it and decompress the zstd.
    listed = RUNNER.docker("image", "ls", "--format", "{{.Repository}} {{.ID}}").out.split("\n")
    docker(
        "image",
        "rm",
        "--force",
        *sorted({line.split()[1] for line in listed if line.split() and line.split()[0].endswith(NAME)}),
    )
    pinned = f"{registries[1]}/{NAME}@{digests[0]}"
    pulled = docker("pull", pinned)
    assert "Pull complete" in pulled, pulled
    assert docker("image", "inspect", "--format", "{{.Id}}", pinned) == local_id
    assert docker("run", "--rm", "--network", "none", "--entrypoint", "cat", pinned, "/marker") == marker
    server = docker("version", "--format", "{{.Server.Version}}")
    assert int(server.split(".")[0]) >= 23, f"engine {server}: zstd layers need Docker 23.0 or later"


def test_the_engines_api_stream_gives_what_docker_save_gives(tmp_path: Path) -> None:
    """The zstd push reads the image from the engine's API socket, not through the CLI: the layout it writes is the
    one the CLI's `docker save` gives, byte for byte, and a missing image gets the engine's own message, naming
    the image."""
    require_engine()
    if RUNNER.image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: make it with `invoke base`", pytrace=False)
    assert engine_socket(os.environ) is not None, "the tests' engine is not on a unix socket: the API path is untested"
    layouts = {}
    for how, (stream, finish) in {
        "api": docker_save(BASE),
        "cli": byte_stream(["docker", "save", BASE], 600),
    }.items():
        layouts[how] = write_layout(stream, tmp_path / how)
        stream.close()
        assert finish().ok, f"{how}: {finish().err}"
    assert layouts["api"] == layouts["cli"]
    files = {
        how: sorted(p.relative_to(tmp_path / how) for p in (tmp_path / how).rglob("*") if p.is_file())
        for how in layouts
    }
    assert files["api"] == files["cli"]
    for name in files["api"]:
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    stream, finish = docker_save(f"{NAME}-missing:v1")
    assert stream.read() == b""
    failed = finish()
    assert not failed.ok and f"{NAME}-missing:v1: the engine answered reference does not exist" in failed.err
