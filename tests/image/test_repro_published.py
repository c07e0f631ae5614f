"""`invoke repro --against REGISTRY/IMAGE@sha256:...` against the real engine and a local registry (.ci/registry.sh):
a published image the engine lacks is pulled by its digest and compared with one cold build; a digest of another
image names the file that differs; a digest the registry lacks, a registry that is down and a tag-only ref the engine
lacks each fail naming the reference, building nothing.

Needs the engine and Debian's docker-registry (`scripts/engine.sh --fixtures`), no base image: the Dockerfile is
FROM scratch with one file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import free_port, require_engine

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.repro import proof

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
REPOSITORY = f"lab/repro-published-{os.getpid()}"
MISSING = "sha256:" + "0" * 64


def docker(*args: str) -> str:
    done = RUNNER.docker(*args, timeout=300)
    if not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip()}", pytrace=False)
    return done.out.strip()


def invoke_repro(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "repro", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An open registry on a free port, stopped (its storage removed) at the end."""
    require_engine()
    env = {**os.environ, "REGISTRY_STATE_DIR": str(tmp_path_factory.mktemp("registries"))}
    name, port = f"pytest-{os.getpid()}-repro", free_port()
    done = RUNNER([str(REGISTRY_SH), "start", name, str(port)], env=env)
    if not done.ok:
        pytest.fail(f"registry.sh start {name} failed:\n{done.out}{done.err}", pytrace=False)
    yield f"127.0.0.1:{port}"
    RUNNER([str(REGISTRY_SH), "stop", name], env=env)


@pytest.fixture(scope="module")
def images() -> Iterator[list[str]]:
    """Image IDs to remove at the end, whatever the test left behind."""
    made: list[str] = []
    yield made
    for image in dict.fromkeys(made):
        RUNNER.docker("image", "rm", "--force", image)


def context(folder: Path, greeting: str) -> Path:
    """A build context: FROM scratch with one file, its time fixed so that only its content can differ."""
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM scratch\nCOPY greeting /greeting\n")
    (folder / "greeting").write_text(greeting)
    os.utime(folder / "greeting", (proof.DOCKERFILE_EPOCH, proof.DOCKERFILE_EPOCH))
    return folder / "Dockerfile"


def publish(dockerfile: Path, registry: str, tag: str, images: list[str]) -> str:
    """Build `dockerfile` as repro does, push it, forget it locally: its REGISTRY/REPOSITORY@sha256:... ref."""
    ref = f"{registry}/{REPOSITORY}:{tag}"
    build = proof.dockerfile_build(dockerfile, dockerfile.parent, proof.DOCKERFILE_EPOCH)
    built = RUNNER([*build[:-1], "--tag", ref, build[-1]], timeout=300)
    assert built.ok, built.err[-2000:]
    images.append(docker("image", "inspect", "--format", "{{.Id}}", ref))
    docker("push", ref)
    by_digest = docker("image", "inspect", "--format", "{{index .RepoDigests 0}}", ref)
    docker("image", "rm", "--force", images[-1])
    assert RUNNER.image_id(by_digest) is None, "the published image must not be local before repro"
    return by_digest


def test_a_published_image_is_pulled_by_its_digest_and_shown_reproducible(
    registry: str, images: list[str], tmp_path: Path
) -> None:
    dockerfile = context(tmp_path / "one", "hello\n")
    published = publish(dockerfile, registry, "one", images)
    done = invoke_repro("--dockerfile", str(dockerfile), "--against", published)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    pulled = RUNNER.image_id(published)
    assert pulled is not None, "repro pulls the image by its digest"
    images.append(pulled)
    assert f"given: {pulled} ({published})" in out
    assert f"verified against digest {published.rpartition('@')[2]}" in out
    assert "identical: the same config digest" in out and f"cold build 1: {pulled}" in out


def test_a_digest_of_another_image_names_the_file_that_differs(
    registry: str, images: list[str], tmp_path: Path
) -> None:
    dockerfile = context(tmp_path / "one", "hello\n")
    other = publish(context(tmp_path / "two", "goodbye\n"), registry, "two", images)
    done = invoke_repro("--dockerfile", str(dockerfile), "--against", other)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    images += [image for image in (RUNNER.image_id(other),) if image]
    report = out[out.index("DIFFERENT:") :]
    [line] = [line for line in report.splitlines() if "/greeting:" in line]
    assert "content" in line and "time" not in line, line
    assert "layer 0: COPY greeting /greeting" in report, report
    assert f"verified against digest {other.rpartition('@')[2]}" in out


@pytest.mark.parametrize("where", ["registry", "down"])
def test_a_digest_that_cannot_be_pulled_is_named_and_nothing_is_built(
    registry: str, tmp_path: Path, where: str
) -> None:
    dockerfile = context(tmp_path / "one", "hello\n")
    host = registry if where == "registry" else f"127.0.0.1:{free_port()}"
    missing = f"{host}/{REPOSITORY}@{MISSING}"
    done = invoke_repro("--dockerfile", str(dockerfile), "--against", missing)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    meaning = "the registry has no image under that digest" if where == "registry" else "registry unreachable"
    assert f"NOT SHOWN REPRODUCIBLE: could not pull {missing}: {meaning} (" in out, out[-3000:]
    assert "cold build" not in out


def test_a_tag_only_ref_the_engine_lacks_is_refused_before_any_build(registry: str, tmp_path: Path) -> None:
    dockerfile = context(tmp_path / "one", "hello\n")
    done = invoke_repro("--dockerfile", str(dockerfile), "--against", f"{registry}/{REPOSITORY}:never-built")
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert f"error: --against '{registry}/{REPOSITORY}:never-built': is no local image and pins no digest" in out
    assert "REGISTRY/IMAGE@sha256:<64 hex>" in out and "cold build" not in out
