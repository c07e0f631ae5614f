"""What CI runs: its cells exist in the real matrix and can be built here (PyPI wheels on the offline base)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dlimages.commands import ci_plan as ci
from dlimages.model.cells import Expansion
from dlimages.model.selection import Selection, select
from dlimages.model.spec import Matrix

REPO = Path(__file__).resolve().parents[3]


def flag_values(flags: str) -> dict[str, str]:
    words = shlex.split(flags)
    return {name.removeprefix("--"): value for name, value in zip(words[::2], words[1::2], strict=True)}


@pytest.mark.parametrize("flags", ci.BUILDS)
def test_each_ci_build_is_one_cell_that_needs_no_unreachable_server(
    flags: str, real_matrix: Matrix, real_expansion: Expansion
) -> None:
    values = flag_values(flags)
    want = Selection.from_flags(values["cuda"], values.get("torch"), values.get("tf"), values["python"], None)
    (cell,) = select(real_matrix, real_expansion, want)
    assert cell.cuda_source == "wheel" and cell.install.index_url is None and cell.install.find_links is None
    assert cell.bootstrap_base, f"{cell.slug} would need a base image from a registry"
    assert values["mirror"] in (*real_matrix.mirrors, "host")


def test_checks_lint_then_test_and_the_end_to_end_run_builds_before_it_pushes() -> None:
    root = Path("/repo")
    checks = [step.name for step in ci.checks(root, "python3")]
    assert checks == ["lint", "render check", "lock check", "zizmor", "actionlint", "unit and GPU tests"]
    engine = Path("/engines/dlimages-ci-engine-x")
    steps = [step.command for step in ci.end_to_end(root, engine)]
    # CI's engine is its own (a fresh data root, deleted at the end) with the test fixtures, and the disk is checked
    # before anything is built: a full disk stops the run with a message, not mid-push.
    assert steps[0] == "bash /repo/scripts/engine.sh --own /engines/dlimages-ci-engine-x --fixtures"
    assert [step.command for step in ci.cleanup(root, engine)][-1].endswith("--stop-own /engines/dlimages-ci-engine-x")
    disk = steps.index(f"invoke disk --need {ci.DISK_NEED_GB}")
    assert disk == 1 and ci.DISK_NEED_GB > 0
    builds = [i for i, command in enumerate(steps) if command.startswith("invoke build ")]
    push = next(i for i, command in enumerate(steps) if "invoke push " in command)
    assert len(builds) == len(ci.BUILDS) and disk < min(builds) and max(builds) < push
    # The README's set-up on Debian's own Python, in a container of the base the first build made.
    [quickstart] = [i for i, command in enumerate(steps) if command.startswith("bash /repo/.ci/quickstart.sh ")]
    assert min(builds) < quickstart < push
    # The push signs and attests with a key made for the run, and both CI images must then verify against it.
    [key] = [i for i, command in enumerate(steps) if "cosign generate-key-pair" in command]
    assert key < push and f"--sign-key /repo/{ci.SIGNING}/cosign.key" in steps[push]
    verified = [i for i, command in enumerate(steps) if command.startswith("invoke verify ")]
    assert [steps[i].split()[3] for i in verified] == [
        f"127.0.0.1:{ci.REGISTRY_PORT}/{image}" for image in (ci.PYTORCH_IMAGE, ci.TENSORFLOW_IMAGE)
    ]
    assert min(verified) > push and all(f"--key /repo/{ci.SIGNING}/cosign.pub" in steps[i] for i in verified)
    # Then the PyTorch image, signed, put under the TensorFlow image's repository and under another cell's tag: it
    # must not verify (issue 32, finding 1).
    [swapped] = [i for i, command in enumerate(steps) if ".ci/substitute.py" in command]
    tensorflow = ci.TENSORFLOW_IMAGE.rsplit(":", 1)[0]
    registry = f"127.0.0.1:{ci.REGISTRY_PORT}"
    assert swapped > max(verified) and steps[swapped].endswith(
        f"/repo/.ci/substitute.py {registry} {ci.PYTORCH_IMAGE} {tensorflow} /repo/{ci.SIGNING}/cosign.pub"
    )
    # The proof of reproducibility: the classic store's cold build of the PyTorch cell must be the image the
    # containerd store's leg built before it (its config digest, kept in that leg's ledger).
    [same] = [i for i, command in enumerate(steps) if ".ci/same-image.py" in command]
    assert builds[0] < same < push and steps[same].endswith(f"/repo/{ci.CONTAINERD_LEDGER} {ci.PYTORCH_IMAGE}")
    # Then the user's commands again as an unprivileged member of the docker group, after the push they compare with.
    [as_user] = [i for i, command in enumerate(steps) if ".ci/as-user.sh" in command]
    assert as_user > push and ci.PYTORCH_IMAGE in steps[as_user]
    assert ci.image_tests(root, "python3", ["lab/x:v1", "lab/y:v1"]).command.endswith(
        "--image lab/x:v1 --image lab/y:v1"
    )


def test_ci_runs_the_readmes_test_command_after_its_set_up() -> None:
    # .ci/run is the README's test command, nothing else; the set-up before it makes a venv (PEP 668 systems refuse
    # a bare `pip install`), and .ci/quickstart.sh runs that set-up block as the README writes it.
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    *_, command = (REPO / ".ci/run").read_text(encoding="utf-8").strip().splitlines()
    assert f"\n    {command}\n" in readme
    setup = readme[readme.index("## Set up and run") : readme.index(f"    {command}")]
    assert "    python3 -m venv .venv && . .venv/bin/activate\n" in setup
    assert "pip install -e . &&" not in setup


def test_the_containerd_leg_builds_from_the_locked_files_alone_then_pushes_verifies_and_runs_as_the_user() -> None:
    root, engine = Path("/repo"), Path("/engines/dlimages-ci-engine-y")
    steps = [step.command for step in ci.containerd_leg(root, engine)]
    assert steps[0] == "bash /repo/scripts/engine.sh --own /engines/dlimages-ci-engine-y --store containerd"
    # The cell and the base it stands on (the build makes it) from the repository of the locked .deb files alone,
    # which apt-repo fills from the live archive, served on 127.0.0.1 for that step only.
    [filled] = [i for i, command in enumerate(steps) if command.startswith("invoke apt-repo --to ")]
    served = next(i for i, command in enumerate(steps) if "-m http.server --bind 127.0.0.1" in command)
    url = f"http://127.0.0.1:{ci.APT_REPO_PORT}"
    step = steps[served]
    assert filled < served and "trap 'kill $server' EXIT" in step
    assert step.endswith(f"invoke build {ci.BUILDS[0]} --apt-from {url}") and "invoke base" not in step
    # What it built is kept for the classic store's build to match; then a signed push, verify and smoke (77).
    [kept] = [i for i, command in enumerate(steps) if command.endswith(f"/repo/{ci.CONTAINERD_LEDGER}")]
    push = next(i for i, command in enumerate(steps) if "invoke push " in command)
    image = f"127.0.0.1:{ci.CONTAINERD_REGISTRY_PORT}/{ci.PYTORCH_IMAGE}"
    assert served < kept < push
    # Reproducible on that store too: another cold build, compared with the one tagged, before it is pushed.
    repro = next(i for i, command in enumerate(steps) if "invoke repro " in command)
    assert kept < repro < push and "trap 'kill $server' EXIT" in steps[repro]
    assert steps[repro].endswith(f"invoke repro {ci.BUILDS[0]} --apt-from {url} --against {ci.PYTORCH_IMAGE}")
    assert steps[push + 1].startswith(f"invoke verify --image {image} ")
    # The docker-group user's commands on that store (build, push, zstd push, tests, smoke of the verified digest),
    # its build from the same repository of locked files, served again.
    user = steps[push + 2]
    assert "-m http.server --bind 127.0.0.1" in user and "trap 'kill $server' EXIT" in user
    keys = f"/repo/{ci.CONTAINERD_SIGNING}/cosign.pub"
    as_user = f"bash /repo/.ci/as-user.sh 127.0.0.1:{ci.CONTAINERD_REGISTRY_PORT} {ci.PYTORCH_IMAGE} {keys} "
    assert user.endswith(f"{as_user}{ci.BUILDS[0]} --apt-from {url}") and len(steps) == push + 3
