"""Bases from a registry of one's own, for real: `invoke bases.mirror` copies the offline Debian base and a built
image into a registry on 127.0.0.1 (an open one, and one that needs `docker login`), then the PyTorch CI cell builds
with `--base-registry` while the engine has no local copy of the base, and its labels name the registry and the
digest it came from. A registry that is not there, or refuses a client without credentials, gets the advice before
anything is built, and no tag moves.

Needs the engine with buildx, skopeo and docker-registry (`bash scripts/engine.sh --fixtures`), the base
`dlimages/base:debian13` and the CI cell's image (CI builds both first). The base is taken out of the engine for a
build and loaded back (same ID) afterwards; the cell's tags are put back on the image they named. DLIMAGES_NO_DOCKER=1
skips.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import free_port, require_engine

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.core.runner import Result
from dlimages.generate.project import Project

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
BASE = "dlimages/base:debian13"
CELL_FLAGS = ("--cuda", "13.2", "--torch", "2.15", "--python", "3.13", "--flavor", "runtime")
CELL_SLUG = "cuda13.2-torch2.15.0-py3.13-runtime"
USER, PASSWORD = "alice", "not-a-secret-0"
_COPIED = re.compile(r"^copied (?P<source>\S+) -> (?P<destination>\S+)@(?P<digest>sha256:[0-9a-f]{64}) ", re.M)


def docker(*args: str, check: bool = True, timeout: float = 600, stdin: str | None = None) -> Result:
    done = RUNNER.docker(*args, timeout=timeout, stdin=stdin)
    if check and not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip() or done.out.strip()}", pytrace=False)
    return done


def invoke(root: Path, env: dict[str, str], *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def cell_refs() -> tuple[str, ...]:
    """The CI cell's refs (its immutable tag first); the engine, skopeo, the base and the cell's image must be
    there: without them this fails, so a broken CI host is not mistaken for a green one."""
    require_engine()
    if shutil.which("skopeo") is None:
        pytest.fail("skopeo is not installed: `bash scripts/engine.sh` installs it", pytrace=False)
    [cell] = [c for c in Project(REPO).expansion.cells if c.slug == CELL_SLUG]
    for image in (BASE, cell.refs[0]):
        if not RUNNER.image_exists(image):
            pytest.fail(f"{image} is missing: `invoke build {' '.join(CELL_FLAGS)}` makes it", pytrace=False)
    return cell.refs


@pytest.fixture(scope="module")
def clone(cell_refs: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of this commit to build in: its own build ledger, nothing written into the checkout under test."""
    path = tmp_path_factory.mktemp("clone") / "repo"
    done = RUNNER(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(path)], timeout=120)
    assert done.ok, done.err
    return path


@dataclass(frozen=True)
class Registry:
    address: str  # 127.0.0.1:PORT
    env: dict[str, str]  # the environment a client with credentials (if any are needed) runs in
    auth: bool


@pytest.fixture(params=["open", "auth"])
def registry(
    request: pytest.FixtureRequest, cell_refs: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """A registry on a free port; for "auth" one that needs `docker login`, logged in through a DOCKER_CONFIG of
    the test's own (docker, buildx and skopeo all read it). Stopped and removed at the end."""
    auth = request.param == "auth"
    state = tmp_path_factory.mktemp("registries")
    env = {**os.environ, "REGISTRY_STATE_DIR": str(state), "DOCKER_CONFIG": str(state / "docker-config")}
    (state / "docker-config").mkdir()
    buildx = Path.home() / ".docker" / "buildx"  # the builder's own state, not credentials
    if buildx.is_dir():
        os.symlink(buildx, state / "docker-config" / "buildx")
    name, port = f"pytest-{os.getpid()}-bases-{request.param}", free_port()
    start = [str(REGISTRY_SH), "start", name, str(port), *(["--auth", f"{USER}:{PASSWORD}"] if auth else [])]
    done = RUNNER(start, env=env)
    try:
        if not done.ok:
            pytest.fail(f"registry.sh start failed:\n{done.out}{done.err}", pytrace=False)
        address = f"127.0.0.1:{port}"
        if auth:
            login = RUNNER(
                ["docker", "login", address, "--username", USER, "--password-stdin"], stdin=PASSWORD, env=env
            )
            assert login.ok, login.err
        yield Registry(address, env, auth)
    finally:
        RUNNER([str(REGISTRY_SH), "stop", name], env=env)


@pytest.fixture
def small_image(cell_refs: tuple[str, ...], tmp_path: Path) -> Iterator[str]:
    """A built image of three layers on the base, to re-host besides the base; removed at the end."""
    ref = f"lab/test-rehost-{os.getpid()}:1"
    context = tmp_path / "small"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN head -c 1048576 /dev/urandom > /a\nRUN head -c 2097152 /dev/urandom > /b\n",
        encoding="utf-8",
    )
    docker("buildx", "build", "--load", "--provenance=false", "--tag", ref, str(context))
    yield ref
    docker("image", "rm", "--force", ref, check=False)


@pytest.fixture
def cell_tags_kept(cell_refs: tuple[str, ...]) -> Iterator[None]:
    """The cell's tags are put back on the image they named before the test; an image the test made is removed."""
    before = {ref: RUNNER.image_id(ref) for ref in cell_refs}
    yield
    made = {RUNNER.image_id(ref) for ref in cell_refs} - set(before.values())
    for ref, image_id in before.items():
        if image_id is not None:
            docker("tag", image_id, ref)
    for image_id in made - {None}:
        docker("image", "rm", "--no-prune", str(image_id), check=False)


@contextlib.contextmanager
def without_local_base(workdir: Path) -> Iterator[None]:
    """The engine without the base (saved to a file first); loaded back, same ID, at the end whatever happened."""
    archive = workdir / "base.tar"
    base_id = RUNNER.image_id(BASE)
    docker("image", "save", "--output", str(archive), BASE)
    docker("image", "rm", BASE)
    try:
        assert not RUNNER.image_exists(BASE)
        yield
    finally:
        docker("image", "rm", "--force", BASE, check=False)  # if a build made it after all
        docker("image", "load", "--input", str(archive))
        assert RUNNER.image_id(BASE) == base_id


def labels(ref: str) -> dict[str, str]:
    found: dict[str, str] = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref).out)
    return found


def skopeo_inspect(ref: str, env: dict[str, str], *flags: str) -> str:
    done = RUNNER(["skopeo", "inspect", "--tls-verify=false", *flags, f"docker://{ref}"], env=env, timeout=120)
    assert done.ok, done.err
    return done.out


def test_rehosted_bases_build_a_cell_with_no_local_base_and_labels_name_them(
    registry: Registry,
    clone: Path,
    cell_refs: tuple[str, ...],
    small_image: str,
    cell_tags_kept: None,
    tmp_path: Path,
) -> None:
    prefix = f"{registry.address}/mirror"
    mirrored = invoke(clone, registry.env, "bases.mirror", "--to", prefix, *CELL_FLAGS, "--image", small_image)
    out = mirrored.stdout + mirrored.stderr
    assert mirrored.returncode == 0, out[-3000:]
    assert f"2 of 2 images copied to {prefix}; build with --base-registry {prefix}" in out
    copied = {m["source"]: (m["destination"], m["digest"]) for m in _COPIED.finditer(out)}
    assert copied.keys() == {BASE, small_image}
    base_ref, base_digest = copied[BASE]
    assert base_ref == f"{prefix}/{BASE}"

    # Every layer, under the digest reported, with the image's own config: the same image, by content.
    for source, (destination, digest) in copied.items():
        assert skopeo_inspect(destination, registry.env, "--format", "{{.Digest}}").strip() == digest
        manifest = json.loads(skopeo_inspect(destination, registry.env, "--raw"))
        local = json.loads(docker("image", "inspect", source).out)[0]
        assert manifest["config"]["digest"] == local["Id"]
        assert len(manifest["layers"]) == len(local["RootFS"]["Layers"]) >= 1

    if registry.auth:  # a client without credentials is refused, with the advice, before anything is built
        stranger = {**registry.env, "DOCKER_CONFIG": str(clone / ".no-credentials")}
        refused = invoke(clone, stranger, "build", *CELL_FLAGS, "--base-registry", prefix, "--no-engine-setup")
        said = refused.stdout + refused.stderr
        assert refused.returncode == 1, said[-3000:]
        assert f"The base image {BASE} cannot be pulled from the registry at {registry.address}" in said
        assert f"as {base_ref}: it asks for credentials" in said
        assert f"`docker login {registry.address}`" in said and "#1 " not in said  # no build step ran

    with without_local_base(tmp_path):
        built = invoke(clone, registry.env, "build", *CELL_FLAGS, "--base-registry", prefix, "--no-engine-setup")
        said = built.stdout + built.stderr
        assert built.returncode == 0, said[-3000:]
        assert f"note: base images come from {prefix} (--base-registry)" in said
        assert "making it with `invoke base`" not in said and not RUNNER.image_exists(BASE)
        found = labels(cell_refs[0])
        assert found["org.opencontainers.image.base.name"] == base_ref
        assert found["org.opencontainers.image.base.digest"] == base_digest


@pytest.mark.parametrize("registry", ["open"], indirect=True)
def test_an_image_by_digest_and_one_from_a_registry_with_a_port_land_as_named(
    registry: Registry, clone: Path, small_image: str
) -> None:
    """Issue 17: `--image REF@sha256:...` landed as REF:latest, and an image from a registry with a port was refused
    by skopeo at copy time (`PREFIX/127.0.0.1:PORT/...` is no reference). Now the first lands under its digest (no
    tag made up) and the second under the registry's host as one path part, `127.0.0.1_PORT`."""

    def mirror(to: str, image: str) -> str:  # the CI cell's flags: without any, every cell's base is copied
        done = invoke(clone, registry.env, "bases.mirror", "--to", to, *CELL_FLAGS, "--image", image)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        return out

    staged = mirror(f"{registry.address}/src", small_image)
    [(source, digest)] = [
        (m["destination"], m["digest"]) for m in _COPIED.finditer(staged) if m["source"] == small_image
    ]
    repository = source.rsplit(":", 1)[0]  # 127.0.0.1:PORT/src/lab/test-rehost-PID

    prefix = f"{registry.address}/mirror"
    out = mirror(prefix, f"{repository}@{digest}")
    mirrored = f"{prefix}/{registry.address.replace(':', '_')}/{repository.split('/', 1)[1]}"
    assert f"copied {repository}@{digest} -> {mirrored}@{digest} " in out
    # --no-tags: a repository holding only an untagged manifest has no tag list (the registry answers 404).
    inspected = skopeo_inspect(f"{mirrored}@{digest}", registry.env, "--no-tags", "--format", "{{.Digest}}")
    assert inspected.strip() == digest

    out = mirror(prefix, f"{source}@{digest}")
    assert f"copied {source}@{digest} -> {mirrored}:1@{digest} " in out  # the tag kept, the same digest
    assert json.loads(skopeo_list_tags(mirrored, registry.env))["Tags"] == ["1"]  # no :latest made up


def skopeo_list_tags(repository: str, env: dict[str, str]) -> str:
    done = RUNNER(["skopeo", "list-tags", "--tls-verify=false", f"docker://{repository}"], env=env, timeout=120)
    assert done.ok, done.err
    return done.out


def test_an_unreachable_base_registry_gets_the_advice_and_moves_no_tag(clone: Path, cell_refs: tuple[str, ...]) -> None:
    before = RUNNER.image_id(cell_refs[0])
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    done = invoke(clone, dict(os.environ), "build", *CELL_FLAGS, "--base-registry", f"{address}/mirror")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    assert f"The base image {BASE} cannot be pulled from the registry at {address}" in said
    assert f"as {address}/mirror/{BASE}: connection refused" in said
    assert f"`invoke bases.mirror --to {address}/mirror`" in said
    assert "`invoke build --cuda 13.2 --torch 2.15.0 --python 3.13 --flavor runtime` without --base-registry" in said
    assert RUNNER.image_id(cell_refs[0]) == before
