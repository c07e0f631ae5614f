"""The builder without an engine: failure advice, the engine check's verdicts, and tagging only after success
(a fake runner plays the engine; tests/image/test_build.py does the same against the real one)."""

from __future__ import annotations

import dataclasses
import io
import json
import shlex
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.building.advice import MIRROR_BASES, Remedies, diagnose
from dlimages.building.builder import (
    TABLE_WIDTH,
    BuildResult,
    all_built,
    attempt_of,
    next_commands,
    run_build,
    run_builds,
    summary_table,
)
from dlimages.building.mirrors import MirrorArgs
from dlimages.building.plan import BuildPlan, Secrets, plan_build
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell, Expansion
from dlimages.model.spec import Matrix

# Real output (cut to the failed step): the cell's pip step with PIP_INDEX_URL=http://127.0.0.1:9/simple/, and a base
# registry (.ci/registry.sh) that does not have the base.
PIP_STEP = r"""
#9 [stage-0 4/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/pip.lock,target=/mnt/pip.lock     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize
#9 3.863 Looking in indexes: http://127.0.0.1:9/simple/
#9 11.38 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a84bd0>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
#9 11.38 ERROR: Could not find a version that satisfies the requirement pip==24.3.1 (from versions: none)
#9 11.38 ERROR: No matching distribution found for pip==24.3.1
#9 ERROR: process "/bin/bash -o pipefail -c umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize" did not complete successfully: exit code: 1
ERROR: failed to solve: process "/bin/bash -o pipefail -c umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize" did not complete successfully: exit code: 1
"""  # noqa: E501
BASE_STEP = r"""
#2 [internal] load metadata for 127.0.0.1:5391/mirror/dlimages/base:debian12
#2 ERROR: 127.0.0.1:5391/mirror/dlimages/base:debian12: not found
ERROR: failed to solve: 127.0.0.1:5391/mirror/dlimages/base:debian12: failed to resolve source metadata for 127.0.0.1:5391/mirror/dlimages/base:debian12: 127.0.0.1:5391/mirror/dlimages/base:debian12: not found
"""  # noqa: E501


@pytest.mark.parametrize(
    ("output", "advice"),
    [
        ("write /var/lib/docker/tmp/x: no space left on device", "The disk is full"),
        ("ERROR: No matching distribution found for torch==9.9.9", "does not exist on the index"),
        ("SSLError(SSLCertVerificationError(... CERTIFICATE_VERIFY_FAILED", "--ca-bundle"),
        ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", "not reachable"),
        ("pull access denied for dlimages/base, repository does not exist", "invoke base"),
        ("E: Unable to locate package zsh-syntax-highlighting", "apt package is missing"),
    ],
)
def test_known_failures_get_advice(output: str, advice: str) -> None:
    assert advice in diagnose(["#8 ...", output, "ERROR: failed to solve"]).advice


def test_unknown_failure_quotes_the_last_line() -> None:
    assert diagnose(["step 1", "something odd happened", ""]).advice == "the build failed: something odd happened"


def done(code: int, out: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, "")


class FakeEngine:
    """A build that prints `lines` and exits `code` (writing the image ID file on success), and a tag log."""

    def __init__(self, plan: BuildPlan, code: int, lines: Sequence[str]) -> None:
        self.plan, self.code, self.lines = plan, code, lines
        self.tagged: list[str] = []

    def stream(self, argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        assert list(argv) == self.plan.build
        for line in self.lines:
            on_line(line)
        if self.code == 0:
            metadata = {
                "containerimage.config.digest": "sha256:" + "c" * 64,
                "containerimage.digest": "sha256:" + "d" * 64,
            }
            self.plan.metadata_file.write_text(json.dumps(metadata))
        return self.code

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "tag":
            self.tagged.append(argv[3])
            return done(0)
        if argv[1] == "info":
            return done(0, '[["Backing Filesystem","extfs"],["Supports d_type","true"]]')  # the classic store
        assert argv[1:4] == ["image", "inspect", "--format"], argv
        return done(0, "123456789\n")


@pytest.fixture
def plan(expansion: Expansion, tmp_path: Path) -> BuildPlan:
    cell = dataclasses.replace(expansion.cells[0], aliases=("v0",))
    return plan_build(cell, MirrorArgs("none"), Secrets(), metadata_file=tmp_path / "build.json")


def test_failed_build_tags_nothing_and_gives_advice(plan: BuildPlan, tmp_path: Path) -> None:
    engine = FakeEngine(plan, 1, ["#8 ...", "ERROR: No matching distribution found for torch==9.9"])
    out = io.StringIO()
    result = run_build(plan, tmp_path, out, Runner(engine.run, engine.stream))
    assert not result.ok
    assert result.error is not None and "does not exist on the index" in result.error
    assert engine.tagged == []
    assert "No matching distribution" in out.getvalue()  # the build's own output is shown as it runs


def test_good_build_gets_every_tag_after_it_succeeded(plan: BuildPlan, tmp_path: Path) -> None:
    engine = FakeEngine(plan, 0, ["#9 DONE 0.1s"])
    result = run_build(plan, tmp_path, io.StringIO(), Runner(engine.run, engine.stream))
    assert result.ok and result.image_id == "sha256:" + "c" * 64 and result.size == 123456789
    assert engine.tagged == list(plan.cell.refs) and len(plan.cell.refs) == 2


def test_summary_names_cells_not_built_after_a_failure(plan: BuildPlan, expansion: Expansion) -> None:
    failed = BuildResult(plan.cell, False, 3.0, error="the disk is full")
    later = next(cell for cell in expansion.cells if cell.slug != plan.cell.slug)
    table = summary_table([failed], [plan.cell, later])
    rows = [line.split() for line in table.splitlines()[2:4]]
    assert rows == [[plan.cell.slug, "FAILED", "(1)", "3s", "-"], [later.slug, "not", "built", "-", "-"]]
    assert f"(1) {plan.cell.slug}: the disk is full" in table.splitlines()
    assert not all_built([failed], [plan.cell, later])
    assert not all_built([BuildResult(plan.cell, True, 3.0)], [plan.cell, later])
    assert all_built([BuildResult(plan.cell, True, 3.0)], [plan.cell])


@pytest.fixture
def offline(expansion: Expansion) -> Cell:
    """The fixture's PyTorch cell on the offline base, as the real PyTorch CI cell is."""
    return next(cell for cell in expansion.cells if cell.slug == "cuda12.1-torch2.1.2-py3.11-runtime")


def test_a_failed_build_is_explained_with_what_the_plan_used(
    offline: Cell, matrix: Matrix, expansion: Expansion, tmp_path: Path
) -> None:
    registry_base = "127.0.0.1:5391/mirror/dlimages/base:debian12"
    plan = plan_build(
        offline, MirrorArgs("none"), Secrets(), base_image=registry_base, metadata_file=tmp_path / "build.json"
    )
    engine = FakeEngine(plan, 1, BASE_STEP.strip().splitlines())
    remedies = Remedies.from_matrix(matrix, expansion.cells)
    result = run_build(plan, tmp_path, io.StringIO(), Runner(engine.run, engine.stream), remedies=remedies)
    assert result.diagnosis is not None and result.diagnosis.kind == "base"
    assert result.summary == "base image not pullable (127.0.0.1:5391)"
    assert result.error is not None and "(--base-registry 127.0.0.1:5391/mirror)" in result.error
    assert f"`{MIRROR_BASES} --to 127.0.0.1:5391/mirror`" in result.error
    assert engine.tagged == []


def test_the_attempt_is_read_off_the_plan(offline: Cell, tmp_path: Path) -> None:
    mirror = MirrorArgs("cloud", pip_index="http://127.0.0.1:9/simple/", torch_index="", torch_find_links="https://x/")
    plan = plan_build(
        offline, mirror, Secrets(), base_image="reg.example/p/dlimages/base:debian12", metadata_file=tmp_path
    )
    attempt = attempt_of(plan)
    assert (attempt.cell, attempt.profile, attempt.base_image) == (
        offline,
        "cloud",
        "reg.example/p/dlimages/base:debian12",
    )
    assert (attempt.pip_index, attempt.torch_index, attempt.torch_find_links) == (
        "http://127.0.0.1:9/simple/",
        None,  # "" only switches PyTorch's index off
        "https://x/",
    )


def test_run_builds_says_one_line_per_failure_and_stops(
    plan: BuildPlan, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = FakeEngine(plan, 1, PIP_STEP.strip().splitlines())
    with caplog.at_level("ERROR", logger="dlimages.building.builder"):
        results = run_builds(
            [plan, plan], tmp_path, keep_going=False, out=io.StringIO(), runner=Runner(engine.run, engine.stream)
        )
    assert len(results) == 1 and results[0].summary == "PyPI unreachable (127.0.0.1:9)"
    assert [record.getMessage() for record in caplog.records] == [
        f"FAILED {plan.cell.slug}: PyPI unreachable (127.0.0.1:9)"
    ]


def test_the_summary_table_fits_100_columns_with_real_errors(
    offline: Cell, plan: BuildPlan, matrix: Matrix, expansion: Expansion, tmp_path: Path
) -> None:
    remedies = Remedies.from_matrix(matrix, expansion.cells)
    pip_plan = plan_build(
        offline, MirrorArgs("none", pip_index="http://127.0.0.1:9/simple/"), Secrets(), metadata_file=tmp_path / "a"
    )
    base_plan = plan_build(
        offline,
        MirrorArgs("none"),
        Secrets(),
        base_image="127.0.0.1:5391/mirror/dlimages/base:debian12",
        metadata_file=tmp_path / "b",
    )
    results = []
    for failing, lines in ((pip_plan, PIP_STEP), (base_plan, BASE_STEP)):
        engine = FakeEngine(failing, 1, lines.strip().splitlines())
        results.append(
            run_build(failing, tmp_path, io.StringIO(), Runner(engine.run, engine.stream), remedies=remedies)
        )
    unexplained = BuildResult(plan.cell, False, 8.0, error=diagnose([PIP_STEP.strip().splitlines()[-1]]).advice)
    good = BuildResult(expansion.cells[1], True, 754.2, "sha256:" + "d" * 64, 5_870_000_000)
    later = expansion.cells[2]
    text = summary_table([*results, unexplained, good], [offline, plan.cell, good.cell, later])
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > TABLE_WIDTH]
    assert not too_wide, "\n".join(too_wide)
    table = [line.split() for line in lines[: lines.index("")]]
    assert table == [
        ["cell", "result", "duration", "size"],
        table[1],  # the rule
        [offline.slug, "FAILED", "(1)", f"{results[0].seconds:.0f}s", "-"],
        [offline.slug, "FAILED", "(2)", f"{results[1].seconds:.0f}s", "-"],
        [plan.cell.slug, "FAILED", "(3)", "8s", "-"],
        [good.cell.slug, "ok", "754s", "5.87", "GB"],
        [later.slug, "not", "built", "-", "-"],
    ]
    # Under the table: what was built, with every tag to `docker run`; then each failure, numbered to match.
    assert all(f"  {ref}" in lines for ref in good.cell.refs)
    first = lines.index(f"(1) {offline.slug}: PyPI unreachable (127.0.0.1:9)")
    assert lines[first - 2] == "  " + good.cell.refs[-1]  # the built images come before the failures
    second = lines.index(f"(2) {offline.slug}: base image not pullable (127.0.0.1:5391)")
    third = next(n for n, line in enumerate(lines) if line.startswith(f"(3) {plan.cell.slug}: "))
    assert first < second < third
    assert lines[first + 1].startswith("    error: WARNING: Retrying (Retry(total=0")
    assert "    pip could not reach the package index at 127.0.0.1:9 (http://127.0.0.1:9/simple/): connection" in lines
    assert any(line.startswith("      - ") for line in lines[second:third])  # ways out, indented under their failure
    # The long error (the whole RUN line) is shortened and wrapped, never one 700-character line.
    assert text.count("/opt/venv/bin/python -m pip install") <= 1


def test_after_a_build_the_next_command_runs_the_very_image_built_safely(plan: BuildPlan) -> None:
    assert next_commands([BuildResult(plan.cell, False, 3.0, error="x")]) == ""
    text = next_commands([BuildResult(plan.cell, True, 3.0)])
    [folder, command] = [line.strip() for line in text.splitlines()[1:]]
    # The folder is made first (else the daemon makes it, owned by root) and is not the checkout ($PWD).
    assert folder == 'mkdir -p "$HOME/workspace"' and "$PWD" not in text
    # The immutable tag (what was just built, never a moving tag another build may own) and the user's folder.
    assert command.endswith(f' -v "$HOME/workspace":/workspace {plan.cell.refs[0]}') and ":v" in plan.cell.refs[0]
    argv = shlex.split(command)
    # Never a pull (`lab/...` on Docker Hub is anyone's), as the host user, JupyterLab on this machine only, and the
    # token Jupyter generates (no fixed one).
    assert argv[:3] == ["docker", "run", "--rm"] and "--pull" in argv and argv[argv.index("--pull") + 1] == "never"
    assert argv[argv.index("--user") + 1] == "$(id -u):$(id -g)"
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8888:8888"
    assert "JUPYTER_TOKEN" not in command and "change-me" not in text
    assert argv[argv.index("--gpus") + 1] == "all"


def test_on_an_engine_without_gpus_the_next_command_runs_there_and_says_what_to_add(plan: BuildPlan) -> None:
    with_gpus = next_commands([BuildResult(plan.cell, True, 3.0)])
    text = next_commands([BuildResult(plan.cell, True, 3.0)], gpus=False)
    assert "--gpus" not in text.splitlines()[-1] and "on a GPU node, add --gpus all" in text.splitlines()[0]
    assert text.splitlines()[-1] == with_gpus.splitlines()[-1].replace(" --gpus all", "")
