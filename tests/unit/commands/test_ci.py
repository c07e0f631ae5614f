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
    # The proof of reproducibility rebuilds the PyTorch cell cold and compares it with the image CI built first.
    [repro] = [i for i, command in enumerate(steps) if "invoke repro " in command]
    assert max(builds) < repro and "--against lab/pytorch-universal-dev:" in steps[repro]
    assert steps[builds[0]].removeprefix("invoke build ") in steps[repro]
    # ... and the base before it, both with their OS packages from the repository of the locked files alone, which
    # apt-repo fills after the builds (from the live archive), served on 127.0.0.1 for that step only.
    [filled] = [i for i, command in enumerate(steps) if command.startswith("invoke apt-repo --to ")]
    assert max(builds) < filled < repro
    url = f"http://127.0.0.1:{ci.APT_REPO_PORT}"
    served = steps[repro]
    assert "-m http.server --bind 127.0.0.1" in served and "trap 'kill $server' EXIT" in served
    assert (
        served.index(f"invoke base --apt-from {url} &&")
        < served.index("invoke repro ")
        < served.index(f"--apt-from {url}", served.index("invoke repro "))
    )
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
