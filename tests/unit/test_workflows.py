"""The generated GitHub workflows (`invoke workflows`) and the weekly package report.

Workflows are generated from the fixture matrix: valid against GitHub's workflow schema (check-jsonschema's vendored
copy, no network), one image job per cell with the flags that select it, actions pinned to commits, a permission
block on every job, secrets only as BuildKit secret files, yamllint- and shellcheck-clean, byte for byte the same
from one process to the next. The shell steps that decide something (which cells a change touches, what a push
sends, how secrets reach the build, what a GPU node runs) are run here with bash against fake `invoke`, `docker`
and a scratch git repo. Only the drift test reads the real matrix: the committed files must be what it generates.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from invoke.program import Program

from dlimages import ci
from dlimages.cells import Cell, Expansion
from dlimages.doctor import Gpu, Node, report
from dlimages.errors import InputError
from dlimages.render import GeneratedFile
from dlimages.selection import Selection, flags_for, select
from dlimages.spec import Matrix
from dlimages.workflows import (
    ACTIONS,
    HEADER,
    WORKFLOWS_DIR,
    check_workflows,
    diff_markdown,
    generate,
    load_reports,
    report_diff,
    stale_workflows,
    write_workflows,
)

REPO = Path(__file__).resolve().parents[2]
SHA = re.compile(r"[0-9a-f]{40}")
TOOLS = {name: shutil.which(name) for name in ("bash", "git", "jq", "shellcheck")}


def needs(*tools: str) -> pytest.MarkDecorator:
    missing = [tool for tool in tools if not TOOLS[tool]]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


@pytest.fixture(scope="module")
def files(expansion: Expansion) -> list[GeneratedFile]:
    return generate(expansion.cells)


@pytest.fixture(scope="module")
def workflows(files: list[GeneratedFile]) -> dict[str, dict[str, Any]]:
    """Each workflow parsed, by name ("ci", "images", "gpu", "weekly")."""
    return {Path(f.path).stem: parse(f.content) for f in files}


def parse(content: bytes) -> dict[str, Any]:
    """A workflow as GitHub reads it: YAML 1.1 loaders take the key `on` for true."""
    data = yaml.safe_load(content)
    assert isinstance(data, dict)
    return {("on" if key is True else key): value for key, value in data.items()}


def steps(workflow: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for job in workflow["jobs"].values():
        yield from job["steps"]


def step(workflow: dict[str, Any], job: str, name: str) -> dict[str, Any]:
    [found] = [s for s in workflow["jobs"][job]["steps"] if s["name"] == name]
    return found


def write(tmp_path: Path, files: list[GeneratedFile]) -> list[Path]:
    paths = []
    for generated in files:
        path = tmp_path / generated.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(generated.content)
        paths.append(path)
    return paths


# --- What the workflows are -------------------------------------------------------------------------------------


def test_the_four_workflows_each_start_with_the_generated_header(files: list[GeneratedFile]) -> None:
    assert [f.path for f in files] == [f"{WORKFLOWS_DIR}/{name}.yml" for name in ("ci", "gpu", "images", "weekly")]
    for generated in files:
        assert generated.content.decode().startswith(HEADER + "\n# "), generated.path


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("check_jsonschema") is None, reason="needs check-jsonschema (dev extra)")
@pytest.mark.parametrize("schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"])
def test_every_workflow_is_valid_against_githubs_schema(
    files: list[GeneratedFile], tmp_path: Path, schema: str
) -> None:
    paths = write(tmp_path, files)
    # The check can fail: a job without a runner (and without a timeout) is refused.
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    steps:\n      - run: true\n")
    argv = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema]
    done = subprocess.run([*argv, *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert subprocess.run([*argv, str(broken)], capture_output=True, timeout=120).returncode == 1


@pytest.mark.skipif(shutil.which("yamllint") is None, reason="needs yamllint (dev extra)")
def test_yamllint_passes_with_the_repos_rules(files: list[GeneratedFile], tmp_path: Path) -> None:
    paths = write(tmp_path, files)
    argv = ["yamllint", "--strict", "-c", str(REPO / ".yamllint.yaml"), *map(str, paths)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@needs("shellcheck")
def test_shellcheck_passes_on_every_run_script(workflows: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    scripts = []
    for name, workflow in workflows.items():
        for number, s in enumerate(steps(workflow)):
            if "run" in s:
                scripts.append(tmp_path / f"{name}-{number}.sh")
                scripts[-1].write_text(s["run"])
    done = subprocess.run(
        ["shellcheck", "--shell=bash", *map(str, scripts)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout


def test_ci_runs_the_quick_gate_one_step_per_check(workflows: dict[str, dict[str, Any]]) -> None:
    ci_steps = workflows["ci"]["jobs"]["checks"]["steps"]
    expected = [(s.name, s.command) for s in ci.checks(Path("."), "python")]
    assert [(s["name"], s["run"]) for s in ci_steps if "run" in s][-len(expected) :] == expected
    assert ("workflow check", "invoke workflows --check") in expected
    assert set(workflows["ci"]["on"]) == {"push", "pull_request"}


def _cells_from_plan(workflows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    entries = step(workflows["images"], "plan", "cells whose inputs changed")["env"]["CELLS"]
    return list(json.loads(entries))


def _selects(matrix: Matrix, expansion: Expansion, flags: str) -> list[Cell]:
    words = shlex.split(flags)
    given = dict(zip(words[::2], words[1::2], strict=True))
    want = Selection.from_flags(
        given["--cuda"], given.get("--torch"), given.get("--tf"), given["--python"], given["--flavor"]
    )
    return select(matrix, expansion, want)


def test_images_has_one_entry_per_cell_whose_flags_select_exactly_that_cell(
    workflows: dict[str, dict[str, Any]], matrix: Matrix, expansion: Expansion
) -> None:
    entries = _cells_from_plan(workflows)
    assert [e["cell"] for e in entries] == [c.slug for c in expansion.cells]
    for entry, cell in zip(entries, expansion.cells, strict=True):
        assert entry["flags"] == flags_for(cell)
        assert _selects(matrix, expansion, entry["flags"]) == [cell]
        assert entry["image"] == cell.refs[0] and entry["bootstrap"] == cell.bootstrap_base
        assert entry["inputs"][:2] == [f"images/{cell.framework}/{cell.slug}/", "images/assets/"]
        assert ("images/bases.lock.json" in entry["inputs"]) == (not cell.bootstrap_base)
    build = workflows["images"]["jobs"]["build"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert build["if"] == "needs.plan.outputs.count != '0'" and build["needs"] == "plan"


def test_weekly_rebuilds_every_cell_from_a_static_matrix(
    workflows: dict[str, dict[str, Any]], expansion: Expansion
) -> None:
    include = workflows["weekly"]["jobs"]["rebuild"]["strategy"]["matrix"]["include"]
    plan = [{k: v for k, v in e.items() if k != "inputs"} for e in _cells_from_plan(workflows)]
    assert include == plan and len(include) == len(expansion.cells)
    assert workflows["weekly"]["on"]["schedule"] == [{"cron": "23 4 * * 1"}]


def test_every_action_is_pinned_to_a_commit_with_its_tag_in_a_comment(
    files: list[GeneratedFile], workflows: dict[str, dict[str, Any]]
) -> None:
    uses = [s["uses"] for w in workflows.values() for s in steps(w) if "uses" in s]
    assert uses and all(SHA.fullmatch(u.rpartition("@")[2]) for u in uses)
    pinned = {a.uses: a.tag for a in ACTIONS}
    assert set(uses) <= set(pinned)
    for generated in files:
        for line in generated.content.decode().splitlines():
            if "uses:" in line:
                ref = line.split("uses: ", 1)[1].split(" #", 1)[0]
                assert line.endswith(f"@{ref.rpartition('@')[2]} # {pinned[ref]}"), line
                assert re.fullmatch(r"v\d+\.\d+\.\d+", pinned[ref])


def test_nothing_is_granted_at_the_top_and_each_job_asks_for_what_it_uses(
    workflows: dict[str, dict[str, Any]],
) -> None:
    writes = {}
    for name, workflow in workflows.items():
        assert workflow["permissions"] == {}, name
        for job_name, job in workflow["jobs"].items():
            assert isinstance(job["permissions"], dict) and job["permissions"], f"{name}.{job_name}"
            assert set(job["permissions"].values()) <= {"read", "write"}
            writes.update({f"{name}.{job_name}.{k}": v for k, v in job["permissions"].items() if v == "write"})
    assert writes == {"images.build.packages": "write"}  # pushing to GHCR; nothing else writes


def test_secrets_reach_steps_only_through_env_and_never_as_a_build_argument(
    workflows: dict[str, dict[str, Any]],
) -> None:
    for workflow in workflows.values():
        for s in steps(workflow):
            assert "${{" not in s.get("run", ""), f"{s['name']}: expressions reach scripts through env only"
            assert "--build-arg" not in s.get("run", "")
            for var in [k for k, v in s.get("env", {}).items() if "secrets." in v]:
                # Tested for being set, then written into a file (a BuildKit secret) or a login's stdin: never a
                # word on a command line, where logs and `ps` would show it.
                allowed = re.compile(rf"\[ -n \"\${var}\" \]|printf '%s(\\n)?' \"\${var}\" [>|]")
                used = [line for line in s["run"].splitlines() if f"${var}" in line]
                assert used and all(allowed.search(line) for line in used), used


def test_gpu_runs_on_a_self_hosted_gpu_runner_after_images_on_the_default_branch(
    workflows: dict[str, dict[str, Any]],
) -> None:
    gpu = workflows["gpu"]
    job = gpu["jobs"]["gpu"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert gpu["on"]["workflow_run"] == {"workflows": ["images"], "types": ["completed"]}
    assert "github.event.workflow_run.head_branch == github.event.repository.default_branch" in job["if"]


# --- The shell steps, run ---------------------------------------------------------------------------------------


def fake(bin_dir: Path, name: str, body: str) -> None:
    """A command on PATH that logs its arguments (one line, shell-quoted) to $FAKE_LOG, then runs `body`."""
    path = bin_dir / name
    path.write_text(f'#!/usr/bin/env bash\nprintf "{name} %s\\n" "$(printf "%q " "$@")" >>"$FAKE_LOG"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_step(s: dict[str, Any], tmp_path: Path, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str]:
    """Run a step's script as GitHub does (bash -e -o pipefail) with its env overridden by `env`; exit code, log."""
    log = tmp_path / "fake.log"
    log.touch()
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir(exist_ok=True)
    full = {
        **{k: "" for k in s.get("env", {})},
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "FAKE_LOG": str(log),
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_ENV": str(tmp_path / "github-env"),
        "GITHUB_OUTPUT": str(tmp_path / "github-output"),
        "GITHUB_ACTOR": "octocat",
        **env,
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", s["run"]],
        cwd=cwd or tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, log.read_text()


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


@needs("bash")
def test_build_gives_secrets_as_files_that_are_gone_afterwards(
    workflows: dict[str, dict[str, Any]], tmp_path: Path, bin_dir: Path
) -> None:
    build = step(workflows["images"], "build", "build")
    assert build["env"]["PIP_NETRC"] == "${{ secrets.PIP_NETRC }}"
    # The fake build keeps what the secret files hold while it runs, and their modes.
    fake(
        bin_dir,
        "invoke",
        'shopt -s nullglob; for f in "$RUNNER_TEMP"/*; do stat -c "%a %n" "$f"; cat "$f"; done >>"$FAKE_LOG"',
    )
    netrc = "machine index.example login ci password s3cr3t-value"
    flags = "--cuda 12.1 --torch 2.1.2 --python 3.11 --flavor runtime"
    code, log = run_step(build, tmp_path, {"FLAGS": flags, "PIP_NETRC": netrc, "PIP_CA_BUNDLE": "-----PEM-----"})
    assert code == 0, log
    temp = tmp_path / "runner-temp"
    argv = shlex.split(log.splitlines()[0])
    assert argv == [
        "invoke", "build", *flags.split(), "--netrc", f"{temp}/netrc", "--ca-bundle", f"{temp}/ca-bundle.pem",
        "--no-engine-setup",
    ]  # fmt: skip
    assert "s3cr3t-value" not in log.splitlines()[0]
    assert f"600 {temp}/netrc" in log and netrc in log and f"600 {temp}/ca-bundle.pem" in log
    assert not list(temp.iterdir()), "the secret files outlive the build"

    (tmp_path / "fake.log").unlink()
    code, log = run_step(build, tmp_path, {"FLAGS": flags})
    assert code == 0 and shlex.split(log.splitlines()[0]) == ["invoke", "build", *flags.split(), "--no-engine-setup"]


@needs("bash")
@pytest.mark.parametrize(
    ("default_branch", "registries", "expected"),
    [
        ("true", "", ["--registry", "ghcr.io/my-org"]),
        ("false", "", ["--registry", "ghcr.io/my-org", "--image", "lab/x:v1.0-cell"]),
        ("true", "registry.example:5000/team ghcr.io/other", ["--registry", "registry.example:5000/team",
                                                              "--registry", "ghcr.io/other"]),
    ],
)  # fmt: skip
def test_push_moves_the_moving_tags_only_from_the_default_branch(
    workflows: dict[str, dict[str, Any]],
    tmp_path: Path,
    bin_dir: Path,
    default_branch: str,
    registries: str,
    expected: list[str],
) -> None:
    push = step(workflows["images"], "build", "push")
    assert push["if"] == "github.event_name != 'pull_request'"
    fake(bin_dir, "invoke", "")
    env = {"DEFAULT_BRANCH": default_branch, "REGISTRIES": registries, "OWNER": "My-Org", "IMAGE": "lab/x:v1.0-cell"}
    code, log = run_step(push, tmp_path, env)
    assert code == 0, log
    assert shlex.split(log) == [
        "invoke", "push", *expected, "--report", ".work/build-report.json", "--no-engine-setup"
    ]  # fmt: skip


def test_pull_requests_build_and_test_but_never_log_in_or_push(workflows: dict[str, dict[str, Any]]) -> None:
    build_steps = workflows["images"]["jobs"]["build"]["steps"]
    for s in build_steps:
        if s["name"] in ("log in to the registries", "push", "upload .work/build-report.json"):
            assert "github.event_name != 'pull_request'" in s["if"], s["name"]
    assert "if" not in step(workflows["images"], "build", "build")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def scratch_repo(tmp_path: Path, workflows: dict[str, dict[str, Any]]) -> Path:
    """A git repo holding each cell's folder, the assets and the bases lock, one commit."""
    repo = tmp_path / "repo"
    for entry in _cells_from_plan(workflows):
        (repo / entry["inputs"][0]).mkdir(parents=True)
        (repo / entry["inputs"][0] / "Dockerfile").write_text(entry["cell"])
    (repo / "images/assets").mkdir()
    (repo / "images/assets/zshrc").write_text("1")
    (repo / "images/bases.lock.json").write_text("{}")
    (repo / "README.md").write_text("1")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


def _changed_cells(
    workflows: dict[str, dict[str, Any]], tmp_path: Path, repo: Path, change: str, event: str = "push"
) -> list[str]:
    base = _git(repo, "rev-parse", "HEAD")
    if change:
        (repo / change).write_text("changed")
        _git(repo, "commit", "-q", "-am", "two")
    plan = step(workflows["images"], "plan", "cells whose inputs changed")
    env = {"EVENT": event, "BASE": base, "CELLS": plan["env"]["CELLS"], "DEFAULT_BRANCH": "main"}
    output = tmp_path / "github-output"
    output.unlink(missing_ok=True)
    code, _ = run_step(plan, tmp_path, {**env, "GITHUB_REF": "refs/heads/main"}, cwd=repo)
    assert code == 0
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    cells = [entry["cell"] for entry in json.loads(values["matrix"])["include"]]
    assert values["count"] == str(len(cells))
    assert all(
        set(entry) == {"cell", "flags", "image", "bootstrap"} for entry in json.loads(values["matrix"])["include"]
    )
    return cells


@pytest.mark.slow
@needs("bash", "git", "jq")
def test_a_change_rebuilds_only_the_cells_whose_inputs_it_touches(
    workflows: dict[str, dict[str, Any]], tmp_path: Path, scratch_repo: Path, expansion: Expansion
) -> None:
    every = [c.slug for c in expansion.cells]
    pulled = [c.slug for c in expansion.cells if not c.bootstrap_base]
    one = expansion.cells[0]
    assert 0 < len(pulled) < len(every)  # the fixture has both kinds of base
    assert _changed_cells(workflows, tmp_path, scratch_repo, f"images/{one.framework}/{one.slug}/Dockerfile") == [
        one.slug
    ]
    assert _changed_cells(workflows, tmp_path, scratch_repo, "README.md") == []
    assert _changed_cells(workflows, tmp_path, scratch_repo, "images/assets/zshrc") == every
    assert _changed_cells(workflows, tmp_path, scratch_repo, "images/bases.lock.json") == pulled
    assert _changed_cells(workflows, tmp_path, scratch_repo, "", event="workflow_dispatch") == every


@needs("bash", "git", "jq")
def test_a_push_without_an_earlier_commit_to_compare_with_builds_every_cell_on_the_default_branch(
    workflows: dict[str, dict[str, Any]], tmp_path: Path, scratch_repo: Path, expansion: Expansion
) -> None:
    plan = step(workflows["images"], "plan", "cells whose inputs changed")
    env = {"EVENT": "push", "BASE": "0" * 40, "CELLS": plan["env"]["CELLS"], "DEFAULT_BRANCH": "main"}
    code, _ = run_step(plan, tmp_path, {**env, "GITHUB_REF": "refs/heads/main"}, cwd=scratch_repo)
    assert code == 0
    count = dict(line.split("=", 1) for line in (tmp_path / "github-output").read_text().splitlines())["count"]
    assert count == str(len(expansion.cells))


@needs("bash")
def test_a_gpu_node_smokes_and_benches_each_cell_the_doctor_says_it_runs(
    workflows: dict[str, dict[str, Any]], tmp_path: Path, bin_dir: Path, expansion: Expansion
) -> None:
    node = Node("535.104.05", (Gpu("H100", "sm_90", "nvidia"),), container_runtime=True, source="given")
    rows = report(expansion.cells, node)
    runs = [f"{r['image']}:{r['tags'][0]}" for r in rows if r["runs"]]
    assert 0 < len(runs) < len(rows)  # the fixture has cells an H100 with this driver cannot run
    (tmp_path / "doctor.json").write_text(json.dumps(rows))
    failing = runs[0]
    fake(
        bin_dir,
        "invoke",
        f'case "$1" in doctor) cat {tmp_path / "doctor.json"} ;; smoke) [[ "$3" != *{failing} ]] ;; esac',
    )
    fake(bin_dir, "docker", "")
    os.symlink(sys.executable, bin_dir / "python")
    gpu = step(workflows["gpu"], "gpu", "smoke and bench the cells this node runs")
    code, log = run_step(gpu, tmp_path, {"REGISTRIES": "registry.example/team", "OWNER": "o"})
    assert code == 1, log  # one cell failed; the others still ran
    calls = [shlex.split(line) for line in log.splitlines()]
    pulled = [c[2] for c in calls if c[:2] == ["docker", "pull"]]
    assert pulled == [f"registry.example/team/{ref}" for ref in runs]
    benched = [c[3] for c in calls if c[:2] == ["invoke", "bench"]]
    assert benched == [f"registry.example/team/{ref}" for ref in runs[1:]]
    assert ["invoke", "smoke", "--image", f"registry.example/team/{failing}", "--no-engine-setup"] in calls
    assert sum(c[:3] == ["docker", "image", "rm"] for c in calls) == len(runs)


# --- Writing, the drift check, reproducibility -----------------------------------------------------------------


def test_check_fails_on_a_hand_edited_a_missing_and_a_stale_generated_file(
    files: list[GeneratedFile], tmp_path: Path
) -> None:
    assert write_workflows(tmp_path, files) == [f"wrote {f.path}" for f in files]
    assert check_workflows(tmp_path, files) == len(files) and write_workflows(tmp_path, files) == []
    folder = tmp_path / WORKFLOWS_DIR
    (folder / "mine.yml").write_text("name: mine\n")  # a workflow of the team's own: never touched
    (folder / "old.yml").write_text(HEADER + "\nname: old\n")  # generated once, no longer
    (folder / "ci.yml").write_text((folder / "ci.yml").read_text() + "# a hand edit\n")
    (folder / "gpu.yml").unlink()
    with pytest.raises(InputError) as caught:
        check_workflows(tmp_path, files)
    text = caught.value.report()
    assert f"{WORKFLOWS_DIR}/ci.yml: differs from matrix.yaml (stale or edited by hand)" in text
    assert f"{WORKFLOWS_DIR}/gpu.yml: missing; run `invoke workflows`" in text
    assert f"{WORKFLOWS_DIR}/old.yml: generated, but no longer" in text and "mine.yml" not in text
    changed = write_workflows(tmp_path, files)
    assert sorted(changed) == sorted(
        [f"wrote {WORKFLOWS_DIR}/ci.yml", f"wrote {WORKFLOWS_DIR}/gpu.yml", f"removed {WORKFLOWS_DIR}/old.yml"]
    )
    assert stale_workflows(tmp_path, files) == [] and (folder / "mine.yml").is_file()


_GENERATE = """
import sys
from dlimages.cells import expand
from dlimages.spec import load_matrix
from pathlib import Path
from dlimages.workflows import generate
for f in generate(expand(load_matrix(Path(sys.argv[1]))).cells):
    sys.stdout.buffer.write(f.path.encode() + b"\\0" + f.content + b"\\0")
"""


@pytest.mark.slow
def test_output_is_byte_identical_from_one_process_to_the_next(files: list[GeneratedFile]) -> None:
    fixture = REPO / "tests/fixtures/matrix.yaml"
    outputs = [
        subprocess.run(
            [sys.executable, "-c", _GENERATE, str(fixture)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    ]
    assert outputs[0] == outputs[1] == b"".join(f.path.encode() + b"\0" + f.content + b"\0" for f in files)


def test_the_committed_workflows_are_what_the_real_matrix_generates(real_expansion: Expansion) -> None:
    assert check_workflows(REPO, generate(real_expansion.cells)) == 4


def in_process(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """`invoke ARGS` in `root`, run by Invoke's own Program in this process: exit code, stdout, stderr."""
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "path", list(sys.path))  # Invoke puts the folder of tasks.py first
    code = 0
    try:
        Program(name="Invoke", binary="inv[oke]").run(["invoke", *args])
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_invoke_workflows_writes_then_check_fails_after_an_edit(
    repo_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = in_process(repo_copy, monkeypatch, capsys, "workflows", "--check")
    assert code == 2 and "images.yml: missing; run `invoke workflows`" in err
    code, out, _ = in_process(repo_copy, monkeypatch, capsys, "workflows")
    assert code == 0 and "4 of 4 workflow files changed." in out
    code, out, _ = in_process(repo_copy, monkeypatch, capsys, "workflows", "--check")
    assert code == 0 and ".github/workflows/ is up to date (4 files)." in out
    images = repo_copy / WORKFLOWS_DIR / "images.yml"
    images.write_text(images.read_text().replace("fail-fast: false", "fail-fast: true"))
    code, _, err = in_process(repo_copy, monkeypatch, capsys, "workflows", "--check")
    assert code == 2 and "images.yml: differs from matrix.yaml" in err


# --- The weekly report: package changes ------------------------------------------------------------------------


def entry(cell: str | None, pip: dict[str, str] | None, dpkg: dict[str, str], ref: str = "lab/x:v1") -> dict[str, Any]:
    return {"ref": ref, "cell": cell, "image": {"pip": pip, "dpkg": dpkg}, "pushed": []}


def test_report_diff_names_each_package_that_moved_came_or_went_per_cell() -> None:
    before = [
        entry("a", {"numpy": "1.26.3", "tqdm": "4.66.1"}, {"libssl3": "3.0.11", "zsh": "5.9"}),
        entry("b", {"numpy": "1.26.3"}, {}),
        entry("gone", {}, {}),
    ]
    after = [
        entry("a", {"numpy": "1.26.4", "Pillow": "10.2.0", "tqdm": "4.66.1"}, {"libssl3": "3.0.13"}),
        entry("b", {"numpy": "1.26.3"}, {}),
        entry("new", {}, {}),
    ]
    diff = report_diff(before, after)
    assert [(c.kind, c.name, c.before, c.after) for c in diff.changed["a"]] == [
        ("pip", "numpy", "1.26.3", "1.26.4"),
        ("pip", "Pillow", None, "10.2.0"),
        ("dpkg", "libssl3", "3.0.11", "3.0.13"),
        ("dpkg", "zsh", "5.9", None),
    ]
    assert (diff.unchanged, diff.new, diff.missing) == (("b",), ("new",), ("gone",))
    text = diff_markdown(diff)
    assert "### a\n" in text and "| pip | numpy | 1.26.3 | 1.26.4 |" in text and "| dpkg | zsh | 5.9 | (gone) |" in text
    assert "| pip | Pillow | (new) | 10.2.0 |" in text and "### b" not in text
    assert "Unchanged (1): b" in text and "New this week (1): new" in text and "Not rebuilt this week (1): gone" in text


def test_report_diff_keys_an_image_without_a_cell_by_its_ref_and_reads_no_pip_as_empty() -> None:
    diff = report_diff(
        [entry(None, None, {"bash": "5.2"}, ref="lab/y:v1")], [entry(None, {}, {"bash": "5.2"}, "lab/y:v1")]
    )
    assert diff.unchanged == ("lab/y:v1",) and not diff.changed
    assert "No package changed." in diff_markdown(diff)
    assert "No earlier build report" in diff_markdown(report_diff([], []), compared=False)


def test_load_reports_reads_every_report_below_a_folder_and_names_a_broken_one(tmp_path: Path) -> None:
    assert load_reports(tmp_path / "absent", "--before") == []
    (tmp_path / "report-a").mkdir()
    (tmp_path / "report-a/build-report.json").write_text(json.dumps([entry("a", {}, {})]))
    (tmp_path / "report-b").mkdir()
    (tmp_path / "report-b/build-report.json").write_text(json.dumps([entry("b", {}, {})]))
    assert [e["cell"] for e in load_reports(tmp_path, "--after")] == ["a", "b"]
    (tmp_path / "report-b/build-report.json").write_text('{"ref": "not a list"}')
    with pytest.raises(InputError) as caught:
        load_reports(tmp_path, "--after")
    assert f"--after {tmp_path / 'report-b/build-report.json'}: is not a build report" in caught.value.report()


def test_invoke_workflows_changes_prints_the_markdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    (tmp_path / "before/r.json").write_text(json.dumps([entry("a", {"numpy": "1"}, {})]))
    (tmp_path / "after/r.json").write_text(json.dumps([entry("a", {"numpy": "2"}, {})]))

    def changes(*args: str) -> Any:
        return in_process(REPO, monkeypatch, capsys, "workflows.changes", *args)

    code, out, _ = changes("--before", str(tmp_path / "before"), "--after", str(tmp_path / "after"))
    assert code == 0 and "| pip | numpy | 1 | 2 |" in out
    code, out, _ = changes("--before", str(tmp_path / "none"), "--after", str(tmp_path / "after"))
    assert code == 0 and "No earlier build report" in out
    code, _, err = changes("--after", str(tmp_path / "none"))
    assert code == 2 and "--after: no build report (*.json) under" in err
