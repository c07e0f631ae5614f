"""The hand-written GitHub workflows (.github/workflows/): what they grant and pin, which jobs an event reaches
(their `if:` conditions evaluated on fork, branch and default-branch events), and their shell steps run with bash
as GitHub runs them, against fake `gh`, `invoke` and `docker` on PATH and a scratch git repo.

The workflows' logic lives in the package (which cells changed: changes.py; which tags a build publishes:
tags.published_refs), so these tests check that each step hands it the right facts.
"""

from __future__ import annotations

import itertools
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
from gh_expressions import runs

from dlimages.model import tags

REPO = Path(__file__).resolve().parents[3]
WORKFLOWS = REPO / ".github/workflows"
# Every action, pinned to the commit of a release whose action.yml says `runs: using: node24` (checked there).
NODE24 = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "actions/download-artifact": ("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
}
# ... or whose action.yml says `runs: using: composite` (shell steps, no Node at all).
COMPOSITE = {
    "sigstore/cosign-installer": ("6f9f17788090df1f26f669e9d70d6ae9567deba6", "v4.1.2"),
}
COMMIT = "c0ffee00" * 5
OTHER = "decade00" * 5


def load(path: Path) -> dict[str, Any]:
    """A workflow as GitHub reads it (YAML 1.1 loaders take the key `on` for true)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {("on" if key is True else key): value for key, value in data.items()}


WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))
ALL = {path.stem: load(path) for path in WORKFLOW_FILES}


def steps(workflow: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


def step(workflow: str, job: str, name: str) -> dict[str, Any]:
    [found] = [s for s in ALL[workflow]["jobs"][job]["steps"] if name in (s.get("name"), s.get("id"))]
    return found


# --- Events, as the `github` context GitHub gives each ----------------------------------------------------------


def github(event_name: str, ref: str, event: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "github": {
            "event_name": event_name,
            "ref": ref,
            "ref_name": ref.rsplit("/", 1)[-1],
            "repository": "lab/dlimages",
            "repository_owner": "lab",
            "sha": COMMIT,
            "event": {"repository": {"default_branch": "main", "full_name": "lab/dlimages"}, **(event or {})},
        },
        "needs": {"build": {"result": "success"}, "plan": {"outputs": {"cells": '[{"cell": "a"}]'}}},
    }


def pull_request(head_repo: str, head_ref: str) -> dict[str, Any]:
    head = {"ref": head_ref, "sha": COMMIT, "repo": {"full_name": head_repo}}
    return github("pull_request", "refs/pull/7/merge", {"pull_request": {"head": head, "base": {"sha": OTHER}}})


def workflow_run(head_repo: str, head_branch: str) -> dict[str, Any]:
    """The run of a workflow another event started, as `workflow_run` hands it on (GitHub runs it on main)."""
    run = {"event": "pull_request", "head_branch": head_branch, "head_repository": {"full_name": head_repo}}
    return github("workflow_run", "refs/heads/main", {"workflow_run": run})


FORK_EVENTS = {
    "fork PR from its own main": pull_request("mallory/dlimages", "main"),
    "fork PR from a branch": pull_request("mallory/dlimages", "feature"),
    "workflow_run of a fork PR from its main": workflow_run("mallory/dlimages", "main"),
}


def triggered_by(workflow: dict[str, Any], event_name: str) -> bool:
    on = workflow["on"]
    return event_name in (on if isinstance(on, (list, dict)) else [on])


def uses_secrets(item: dict[str, Any]) -> bool:
    return "secrets." in json.dumps({k: item.get(k) for k in ("env", "with", "secrets")})


# --- What the workflows are -------------------------------------------------------------------------------------


def test_the_workflows_are_the_four_hand_written_ones() -> None:
    assert sorted(ALL) == ["ci", "gpu", "images", "lock"]
    assert not any("Generated" in path.read_text(encoding="utf-8").split("\n", 1)[0] for path in WORKFLOW_FILES)


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_every_action_is_a_node24_or_composite_release_pinned_by_commit_with_its_tag_in_a_comment(path: Path) -> None:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if "uses:" in line]
    assert lines
    for line in lines:
        target = line.split("uses:", 1)[1].split("#", 1)[0].strip()
        if target.startswith("./.github/workflows/"):
            continue  # this repository's own workflow, at the same commit
        action, _, sha = target.partition("@")
        assert re.fullmatch(r"[0-9a-f]{40}", sha), f"{line}: not pinned to a full commit SHA"
        pinned = NODE24.get(action) or COMPOSITE.get(action)
        assert (sha, line.rsplit("# ", 1)[-1]) == pinned, f"{line}: not a pinned Node 24 or composite release"


@pytest.mark.parametrize("name", sorted(ALL))
def test_least_privilege_no_token_left_in_git_and_no_expression_in_a_script(name: str) -> None:
    workflow = ALL[name]
    assert workflow["permissions"] == {} and "group" in workflow["concurrency"]
    for job_name, job in workflow["jobs"].items():
        assert isinstance(job.get("permissions"), dict), f"{name}.{job_name} says which permissions it needs"
        for s in job.get("steps", []):
            assert "${{" not in s.get("run", ""), f"{name}.{job_name}: expressions reach scripts through env only"
            if s.get("uses", "").startswith("actions/checkout@"):
                assert s["with"]["persist-credentials"] is False
    writes = {
        f"{name}.{job_name}.{scope}"
        for name, workflow in ALL.items()
        for job_name, job in workflow["jobs"].items()
        for scope, access in job["permissions"].items()
        if access == "write"
    }
    assert writes == {
        "images.build.packages",
        "images.build.id-token",  # signs keyless what it pushes
        "images.gpu.actions",  # starts gpu.yml, which waits for its own environment's approval
        "lock.pull-request.contents",
        "lock.pull-request.pull-requests",
    }


def test_no_workflow_runs_on_a_trigger_that_hands_a_fork_the_base_repositorys_secrets() -> None:
    for name, workflow in ALL.items():
        assert not triggered_by(workflow, "pull_request_target"), name
        assert not triggered_by(workflow, "workflow_run"), f"{name}: a fork's pull request can start it"


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_job_with_a_secret_a_write_token_or_the_gpu_runner_has_an_environment(name: str) -> None:
    for job_name, job in ALL[name]["jobs"].items():
        if "uses" in job:
            continue  # a reusable workflow: its own jobs say
        sensitive = (
            any(uses_secrets(s) for s in job["steps"])
            or "write" in {access for scope, access in job["permissions"].items() if scope != "actions"}
            or "gpu" in job["runs-on"]
        )
        assert not sensitive or job.get("environment"), f"{name}.{job_name} needs an environment with reviewers"


@pytest.mark.parametrize("event", FORK_EVENTS, ids=list(FORK_EVENTS))
def test_a_fork_never_reaches_a_secret_the_gpu_runner_or_a_write_token(event: str) -> None:
    context = FORK_EVENTS[event]
    event_name = context["github"]["event_name"]
    for name, workflow in ALL.items():
        if not triggered_by(workflow, event_name):
            continue
        for job_name, job in workflow["jobs"].items():
            if not runs(job.get("if"), context):
                continue
            where = f"{name}.{job_name} on a {event}"
            assert "uses" not in job, f"{where} calls {job['uses']}"
            assert "gpu" not in job["runs-on"], f"{where} runs on the GPU node"
            assert not uses_secrets(job), where
            for s in job["steps"]:
                assert not (uses_secrets(s) and runs(s.get("if"), context)), f"{where}: step {s.get('name')}"


def test_the_gpu_node_runs_for_the_default_branch_only_and_apart_from_the_images_run() -> None:
    start, node = ALL["images"]["jobs"]["gpu"], ALL["gpu"]["jobs"]["gpu"]
    # Started (workflow_dispatch), not called: the node's outcome must not decide the images run's success.
    assert "gh workflow run gpu.yml" in start["steps"][0]["run"] and "uses" not in start
    assert set(ALL["gpu"]["on"]) == {"workflow_dispatch"} and node["runs-on"] == ["self-hosted", "gpu"]
    main, feature = github("push", "refs/heads/main"), github("push", "refs/heads/feature")
    assert runs(start["if"], main) and not runs(start["if"], feature)
    assert not runs(start["if"], github("schedule", "refs/heads/main"))
    assert runs(node["if"], github("workflow_dispatch", "refs/heads/main"))
    assert not runs(node["if"], github("workflow_dispatch", "refs/heads/feature"))


def test_a_pull_request_from_a_branch_of_this_repository_is_not_built_twice() -> None:
    same_repo = pull_request("lab/dlimages", "feature")
    for name in ("ci", "images"):
        first = next(iter(ALL[name]["jobs"].values()))
        assert triggered_by(ALL[name], "push") and not runs(first["if"], same_repo), name
        assert runs(first["if"], pull_request("mallory/dlimages", "feature")), name
        assert runs(first["if"], github("push", "refs/heads/feature")), name


def test_the_cells_are_chosen_at_run_time() -> None:
    build = ALL["images"]["jobs"]["build"]
    assert build["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.cells) }}"
    assert "invoke matrix --json --since" in step("images", "plan", "plan")["run"]


def test_a_cell_on_an_offline_base_makes_that_base_only() -> None:
    made = step("images", "build", "make the offline Debian base")
    assert made["if"] == "matrix.bootstrap" and made["env"]["OS"] == "${{ matrix.os }}"
    assert 'invoke base --os "$OS" --no-engine-setup' in made["run"]


def test_no_debian_mirror_variable_is_needed() -> None:
    assert "DEBIAN_MIRROR" not in (WORKFLOWS / "images.yml").read_text(encoding="utf-8")
    assert "--mirror" not in step("images", "build", "make the offline Debian base")["run"]


# --- The shell steps, run ---------------------------------------------------------------------------------------


def fake(bin_dir: Path, name: str, body: str = "") -> None:
    """A command on PATH that logs its arguments (one shell-quoted line) to $FAKE_LOG, then runs `body`."""
    path = bin_dir / name
    path.write_text(f'#!/usr/bin/env bash\nprintf "{name} %s\\n" "$(printf "%q " "$@")" >>"$FAKE_LOG"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_step(s: dict[str, Any], tmp_path: Path, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str]:
    """Run a step's script as GitHub does (bash --noprofile --norc -eo pipefail) with the step's env names set
    (empty unless `env` gives them); the exit code and the fakes' log."""
    log = tmp_path / "fake.log"
    log.write_text("")
    (tmp_path / "runner-temp").mkdir(exist_ok=True)
    full = {
        **{key: "" for key in s.get("env", {})},
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "FAKE_LOG": str(log),
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        "GITHUB_OUTPUT": str(tmp_path / "github-output"),
        "GITHUB_ACTOR": "octocat",
        "GITHUB_RUN_ID": "42",
        **env,
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", s["run"]],
        cwd=cwd or tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, log.read_text() + done.stdout + done.stderr


def calls(log: str, program: str) -> list[list[str]]:
    return [shlex.split(line)[1:] for line in log.splitlines() if line.startswith(f"{program} ")]


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


# gh run list answers the last successful push run of a branch from files: success/<branch> holds its commit.
FAKE_GH = """
branch="" status=""
while (($#)); do case "$1" in --branch) branch="$2"; shift ;; --status) status="$2"; shift ;; esac; shift; done
if [ -n "$FAKE_GH_FAILS" ]; then echo "HTTP 502" >&2; exit 1; fi
if [ "$status" = success ] && [ -f "$FAKE_DIR/success/$branch" ]; then cat "$FAKE_DIR/success/$branch"; fi
"""
FAKE_MATRIX = """
if [ "$1" = matrix ]; then
  echo '[{"cell": "a", "flags": "--cuda 11.8 --torch 2.1.2", "bootstrap": true, "os": "debian13", "tags": ["v1-a"]}]'
fi
"""


@pytest.mark.parametrize(
    ("event", "branch", "successes", "gh_fails", "since"),
    [
        ("push", "feature", {"feature": COMMIT, "main": OTHER}, False, COMMIT),
        ("push", "feature", {"main": OTHER}, False, OTHER),  # a new branch: the default branch's last success
        ("push", "main", {"main": OTHER}, False, OTHER),
        ("push", "main", {}, False, ""),  # the first run: every cell
        ("push", "main", {"main": OTHER}, True, ""),  # GitHub's API does not answer: every cell
        ("pull_request", "7/merge", {"main": OTHER}, False, "ba5e" * 10),
        ("schedule", "main", {"main": OTHER}, False, ""),
        ("workflow_dispatch", "feature", {"feature": COMMIT}, False, ""),
    ],
)
def test_change_detection_compares_with_the_last_successful_run(
    tmp_path: Path,
    bin_dir: Path,
    event: str,
    branch: str,
    successes: dict[str, str],
    gh_fails: bool,
    since: str,
) -> None:
    fake(bin_dir, "gh", FAKE_GH)
    fake(bin_dir, "invoke", FAKE_MATRIX)
    (tmp_path / "success").mkdir()
    for name, sha in successes.items():
        (tmp_path / "success" / name).write_text(sha + "\n")
    env = {
        "EVENT": event,
        "BRANCH": branch,
        "DEFAULT_BRANCH": "main",
        "PR_BASE": "ba5e" * 10 if event == "pull_request" else "",
        "FAKE_DIR": str(tmp_path),
        "FAKE_GH_FAILS": "1" if gh_fails else "",
    }
    code, log = run_step(step("images", "plan", "plan"), tmp_path, env)
    assert code == 0, log
    assert calls(log, "invoke") == [["matrix", "--json", "--since", since]]
    for asked in calls(log, "gh"):
        assert asked[:2] == ["run", "list"] and ["--status", "success"] == asked[asked.index("--status") :][:2]
        assert ["--event", "push"] == asked[asked.index("--event") :][:2]
    assert bool(calls(log, "gh")) == (event == "push")
    output = (tmp_path / "github-output").read_text()
    assert output == 'cells=[{"cell":"a","flags":"--cuda 11.8 --torch 2.1.2","bootstrap":true,"os":"debian13"}]\n'


IMMUTABLE, RELEASE = "lab/x:v1.0-cuda11.8-torch2.1.2-py3.10-runtime", "lab/x:v1.0"


def published(argv: list[str]) -> set[str]:
    """What `invoke push ARGV` publishes for one cell built with its immutable tag and the release tag."""
    flags: dict[str, list[str]] = {}
    for flag, value in itertools.pairwise(argv):
        if flag.startswith("--") and not value.startswith("--"):
            flags.setdefault(flag, []).append(value)
    origin = tags.Origin.from_flags(*(flags.get(f, [None])[0] for f in ("--git-ref", "--default-branch", "--commit")))
    refs = flags.get("--image") or [IMMUTABLE, RELEASE]
    return set(tags.published_refs(refs, {RELEASE}, origin).values())


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("refs/heads/main", {IMMUTABLE, RELEASE}),
        ("refs/heads/feature", {f"{IMMUTABLE}-{COMMIT[:12]}"}),
        ("refs/heads/main-backport", {f"{IMMUTABLE}-{COMMIT[:12]}"}),
    ],
)
def test_release_tags_are_pushed_from_the_default_branch_only(
    tmp_path: Path, bin_dir: Path, ref: str, expected: set[str]
) -> None:
    push = step("images", "build", "push")
    assert push["if"] == "github.event_name == 'push' || github.event_name == 'workflow_dispatch'"
    fake(bin_dir, "invoke")
    fake(bin_dir, "docker", 'cat >"$FAKE_LOG.stdin"')  # docker login reads the password from stdin
    env = {
        "GITHUB_REF": ref,
        "GITHUB_SHA": COMMIT,
        "DEFAULT_BRANCH": "main",
        "OWNER": "Lab",
        "IMAGE": IMMUTABLE,  # what the generated workflow of old took
        "GHCR_TOKEN": "ghs_s3cr3t",
        "REGISTRIES": "ghcr.io/lab registry.example:5000/team",
        "REGISTRY_USERNAME": "ci",
        "REGISTRY_PASSWORD": "pa55word",
    }
    code, log = run_step(push, tmp_path, env)
    assert code == 0, log
    [argv] = [c for c in calls(log, "invoke") if c[:1] == ["push"]]
    assert published(argv) == expected and "--keyless" in argv
    assert argv.count("--registry") == 2 and "ghcr.io/lab" in argv
    assert "ghs_s3cr3t" not in log and "pa55word" not in log  # never on a command line
    assert ["login", "registry.example:5000", "--username", "ci", "--password-stdin"] in calls(log, "docker")


@pytest.mark.parametrize("key", ["", "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nc2VjcmV0\n"])
def test_the_push_signs_keyless_and_with_the_repositorys_own_key_where_the_secret_holds_one(
    tmp_path: Path, bin_dir: Path, key: str
) -> None:
    build = ALL["images"]["jobs"]["build"]
    push, install = step("images", "build", "push"), step("images", "build", "install cosign")
    assert build["permissions"]["id-token"] == "write"
    assert build["steps"].index(install) < build["steps"].index(push) and install["if"] == push["if"]
    for name in ("COSIGN_PRIVATE_KEY", "COSIGN_PASSWORD"):  # from secrets to the environment, never to a script
        assert push["env"][name] == "${{ secrets.NAME }}".replace("NAME", name)
    fake(bin_dir, "invoke", 'echo "DLIMAGES_SIGN_KEY=${DLIMAGES_SIGN_KEY-unset}" >>"$FAKE_LOG"')
    fake(bin_dir, "docker", "cat >/dev/null")
    env = {"GITHUB_REF": "refs/heads/main", "GITHUB_SHA": COMMIT, "DEFAULT_BRANCH": "main", "OWNER": "lab"}
    env |= {"GHCR_TOKEN": "ghs_s3cr3t", "COSIGN_PRIVATE_KEY": key, "COSIGN_PASSWORD": "pw" if key else ""}
    env["COMPRESSION"] = "zstd"  # what the step's env gives from the repository variable
    code, log = run_step(push, tmp_path, env)
    assert code == 0, log
    [argv] = [c for c in calls(log, "invoke") if c[:1] == ["push"]]
    assert "--keyless" in argv
    # The layers' compression is the repository variable's, gzip where it is not set.
    assert push["env"]["COMPRESSION"] == "${{ vars.PUSH_COMPRESSION || 'gzip' }}"
    assert argv[argv.index("--compression") + 1] == "zstd"
    # cosign reads the key from the variable it names: the key itself is on no command line, nor the variable set
    # (to an empty key) where the secret is not.
    assert re.findall(r"DLIMAGES_SIGN_KEY=(.*)", log) == ["env://COSIGN_PRIVATE_KEY" if key else "unset"]
    assert "c2VjcmV0" not in log
    # The weekly rebuild's push to a registry on the runner publishes nothing, and signs nothing.
    assert "--no-sign" in step("images", "build", "build report")["run"]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone (of a bare origin) holding a lock, the README and a workflow, as the lock workflow checks it out."""
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    (work / "images/pytorch/a").mkdir(parents=True)
    (work / "images/pytorch/a/requirements.lock").write_text("old\n")
    (work / ".github/workflows").mkdir(parents=True)
    (work / ".github/workflows/ci.yml").write_text("name: ci\n")
    (work / "README.md").write_text("readme\n")
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "one")
    _git(work, "remote", "add", "origin", str(origin))
    _git(work, "push", "-q", "origin", "main")
    return work


def _patch(clone: Path, path: str | None) -> None:
    """locks.patch in the clone, as the lock job writes it: `path` changed and a new lock (None: nothing)."""
    if path is not None:
        (clone / path).write_text("new\n")
        (clone / "images/pytorch/b").mkdir(parents=True)
        (clone / "images/pytorch/b/requirements.lock").write_text("locked\n")
    _git(clone, "add", "--intent-to-add", ".")
    patch = _git(clone, "diff", "--binary")
    _git(clone, "reset", "-q", "--hard")
    _git(clone, "clean", "-qfd")
    (clone / "locks.patch").write_text(patch + "\n" if patch else "")


@pytest.mark.parametrize(
    ("changed", "code", "files"),
    [
        ("images/pytorch/a/requirements.lock", 0, 2),
        ("README.md", 0, 2),  # rendered from the locks
        (".github/workflows/ci.yml", 1, 0),
        (None, 0, 0),
    ],
)
def test_the_lock_workflow_proposes_only_locks_and_what_renders_from_them(
    tmp_path: Path, bin_dir: Path, clone: Path, changed: str | None, code: int, files: int
) -> None:
    fake(bin_dir, "gh", 'if [ "$1 $2" = "pr list" ]; then echo 0; fi')
    _patch(clone, changed)
    env = {"BASE": "main", "LOCKED": "failure"}
    exit_code, log = run_step(step("lock", "pull-request", "commit, push, open the pull request"), tmp_path, env, clone)
    assert exit_code == code, log
    pushed = _git(tmp_path / "origin.git", "branch", "--list", "locks/main")
    if not files:
        assert not pushed and not [c for c in calls(log, "gh") if c[:2] == ["pr", "create"]]
        assert ("changes files outside images/" if code else "the locks are up to date") in log
        return
    assert _git(tmp_path / "origin.git", "show", "--stat", "--format=%s", "locks/main").count("|") == files
    [create] = [c for c in calls(log, "gh") if c[:2] == ["pr", "create"]]
    assert create[create.index("--base") + 1] == "main" and "could not be resolved" in create[-1]


def test_the_gpu_node_smokes_and_benches_what_the_doctor_says_it_runs_each_verified_first(
    tmp_path: Path, bin_dir: Path
) -> None:
    rows = [
        {"image": "lab/x", "tags": ["v1-a", "v1"], "runs": True},  # its smoke fails
        {"image": "lab/x", "tags": ["v1-b"], "runs": False},
        {"image": "lab/x", "tags": ["v1-c"], "runs": True},
        {"image": "lab/x", "tags": ["v1-d"], "runs": True},  # not signed by this repository's workflows: refused
    ]
    (tmp_path / "doctor.json").write_text(json.dumps(rows))
    venv = tmp_path / "runner-temp/venv/bin"
    venv.mkdir(parents=True)
    os.symlink(sys.executable, venv / "python")
    doctor = f"doctor) cat {tmp_path / 'doctor.json'} ;;"
    refuse = 'smoke|bench) [[ "$3" != *v1-a && "$3" != *v1-d ]] || { [[ "$1" == smoke ]]; exit 1; } ;;'
    fake(venv, "invoke", f'case "$1" in {doctor} {refuse} esac')
    fake(bin_dir, "docker", 'echo "DOCKER_CONFIG=$DOCKER_CONFIG" >>"$FAKE_LOG"; [ "$1" != login ] || cat >/dev/null')
    env = {"REGISTRIES": "registry.example/team", "OWNER": "lab", "REGISTRY_PASSWORD": "pa55", "REGISTRY_USERNAME": "u"}
    env["GITHUB_REPOSITORY"], env["DEFAULT_BRANCH"] = "lab/dl.images", "main"
    code, log = run_step(step("gpu", "gpu", "smoke and bench the cells this node runs"), tmp_path, env)
    assert code == 1, log  # two cells failed; the other still ran
    # images.yml of this repository, on its default branch, anchored: no other workflow matches.
    identity = r"^https://github\.com/lab/dl\.images/\.github/workflows/images\.yml@refs/heads/main$"
    x = "registry.example/team/lab/x"
    runs = [c for c in calls(log, "invoke") if c[0] in ("smoke", "bench", "verify")]
    # smoke and bench verify the image themselves (signed keyless by this repository) and run the digest they
    # verified; never --no-verify. The tag each pulled is removed after.
    assert runs == [
        [task, "--image", f"{x}:{tag}", "--identity", identity, "--no-engine-setup"]
        for tag, tasks in (("v1-a", ["smoke"]), ("v1-c", ["smoke", "bench"]), ("v1-d", ["smoke"]))
        for task in tasks
    ]
    removed = [c[-1] for c in calls(log, "docker") if c[:2] == ["image", "rm"]]
    assert removed == [f"{x}:{tag}" for tag in ("v1-a", "v1-c", "v1-d")]
    assert set(re.findall(r"DOCKER_CONFIG=(.*)", log)) == {str(tmp_path / "runner-temp/docker-config")}
    assert "pa55" not in log.replace("REGISTRY_PASSWORD", "")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck (dev extra)")
def test_shellcheck_passes_on_every_run_script(tmp_path: Path) -> None:
    scripts = []
    for name, workflow in ALL.items():
        for number, s in enumerate(steps(workflow)):
            if "run" in s:
                scripts.append(tmp_path / f"{name}-{number}.sh")
                scripts[-1].write_text(s["run"])
    done = subprocess.run(
        ["shellcheck", "--shell=bash", *map(str, scripts)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout
