"""The Invoke tasks as a user runs them: `python -m invoke ...` from the repo root, exit codes and output (cases
that stop before any command runs: Invoke's own Program in this process, loading tasks.py the same way)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from invoke.program import Program

from dlimages.generate.project import Project

REPO = Path(__file__).resolve().parents[3]
IMAGE = "lab/pytorch-universal-dev"


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """`invoke ARGS` from the repo root, run by Invoke's own Program in this process (loading tasks.py as on a
    terminal, without a Python start each): its exit code, stdout and stderr as a CompletedProcess."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        monkeypatch.chdir(REPO)
        monkeypatch.setattr(sys, "path", list(sys.path))  # Invoke puts the folder of tasks.py first
        code: int = 0
        try:
            Program(name="Invoke", binary="inv[oke]").run(["invoke", *args])  # as invoke/__main__.py makes it
        except SystemExit as stopped:
            code = stopped.code if isinstance(stopped.code, int) else (0 if stopped.code is None else 1)
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(["invoke", *args], code, captured.out, captured.err)

    return run


def test_build_dry_run_prints_the_command_and_both_tags(invoke: Cli) -> None:
    result = invoke("build", "--cuda", "11.8", "--torch", "2.1", "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "docker buildx build " in out
    assert "--file images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/Dockerfile" in out
    assert f"{IMAGE}:v1.0-cuda11.8-torch2.1.2-py3.10-runtime\n" in out
    assert out.rstrip().endswith(f" {IMAGE}:v1.0")
    assert out.count("docker buildx build") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--cuda", "11.7"],
            "error: --cuda: unknown CUDA version '11.7' (allowed: ",  # the lists: test_selection.py
            id="cuda",
        ),
        pytest.param(
            ["--torch", "9.9"],
            "error: --torch: no release matches '9.9' (allowed: ",
            id="torch",
        ),
        pytest.param(
            ["--cuda", "11.0", "--torch", "2.1"],
            "error: --cuda 11.0 --torch 2.1: no valid cell matches this selection: PyTorch 2.1.2 was published for "
            "CUDA 11.8, 12.1, not 11.0",
            id="impossible",
        ),
        pytest.param(
            ["--torch", "2.1", "--tf", "2.14"], "error: --torch/--tf: choose one framework per build", id="both"
        ),
        pytest.param(["--mirror", "tsinghua"], "error: --mirror: unknown mirror profile 'tsinghua'", id="mirror"),
        pytest.param(
            ["--ca-bundle", "/nonexistent/ca.pem"],
            "error: --ca-bundle: no such file: /nonexistent/ca.pem",
            id="ca-bundle",
        ),
        pytest.param(["--torch", ""], "error: --torch: is empty", id="empty-version"),  # was: every cell
        pytest.param(
            ["--ca-bundle", str(REPO / "README.md"), "--netrc", str(REPO / "tests")],
            f"error: --ca-bundle: {REPO / 'README.md'} holds no PEM certificate (allowed: a PEM bundle of CA "
            f"certificates ('-----BEGIN CERTIFICATE-----' blocks))\nerror: --netrc: {REPO / 'tests'} is not a "
            "regular file (a directory, device or pipe)",
            id="unusable-secret-files",
        ),
    ],
)
def test_build_refuses_bad_input_with_exit_2_and_no_traceback(invoke: Cli, args: list[str], message: str) -> None:
    result = invoke("build", *args, "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stdout + result.stderr
    assert "docker buildx" not in result.stdout


def test_matrix_json_describes_every_cell(invoke: Cli) -> None:
    result = invoke("matrix", "--json")
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)
    assert isinstance(cells, list) and cells  # which cells: tests/unit/model/snapshots/matrix.json
    keys = {
        "image",
        "tags",
        "cuda",
        "cudnn",
        "framework",
        "framework_version",
        "python",
        "flavor",
        "base_image",
        "min_driver",
        "dockerfile",
        "lock",
    }
    for cell in cells:
        assert keys <= set(cell), cell
        assert cell["lock"] in ("locked", "stale", "unlocked", "broken")
        assert isinstance(cell["tags"], list) and cell["tags"]
        assert cell["framework_version"].count(".") == 2  # the full release, not the partial flag
        assert (REPO / cell["dockerfile"]).is_file()
    [default] = [c for c in cells if "v1.0" in c["tags"] and c["framework"] == "pytorch"]
    assert (default["cuda"], default["framework_version"], default["python"], default["min_driver"]) == (
        "11.8",
        "2.1.2",
        "3.10",
        "520.61.05",
    )


def _counts() -> tuple[int, int]:
    """The real matrix's numbers of valid cells and excluded combinations (the cells: snapshots/matrix.json)."""
    expansion = Project(REPO).expansion
    return len(expansion.cells), len(expansion.excluded)


def test_matrix_table_lists_the_cells(invoke: Cli) -> None:
    result = invoke("matrix")
    assert result.returncode == 0, result.stderr
    assert "v1.0-cuda11.8-torch2.1.2-py3.10-runtime, v1.0" in result.stdout
    cells, excluded = _counts()
    assert f"\n{cells} valid cells (" in result.stdout
    assert f"`invoke matrix --explain` shows the {excluded} excluded.\n" in result.stdout
    # Which cells are locked is a column: a PyPI-only cell is, one on PyTorch's own index (not reachable) is not.
    [pypi] = [line for line in result.stdout.splitlines() if "v1.0-cuda12.1-torch2.1.2-py3.11-runtime" in line]
    [index] = [line for line in result.stdout.splitlines() if "v1.0-cuda11.8-torch2.1.2-py3.11-runtime" in line]
    assert " locked " in pypi and " unlocked " in index
    assert " not locked: pip resolves them at build time" in result.stdout


def test_matrix_explain_lists_the_exclusions(invoke: Cli) -> None:
    result = invoke("matrix", "--explain")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        "PyTorch 2.1.2 + CUDA 11.0 + Python 3.10 (runtime): excluded\n"
        "    - PyTorch 2.1.2 was published for CUDA 11.8, 12.1, not 11.0 [cuda-build;" in out
    )
    assert "TensorFlow 2.4.4 + CUDA 11.0 + Python 3.10 (runtime): excluded" in out
    assert "[no-duplicate-cuda;" in out and "[base-image;" in out and "[python-wheel;" in out
    cells, excluded = _counts()
    assert out.rstrip().endswith(f"\n\n{cells} valid cells, {excluded} combinations excluded.")


def test_render_check_passes_on_the_repo(invoke: Cli) -> None:
    result = invoke("render", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("images/ and the generated docs are up to date (")


@pytest.mark.parametrize(
    ("task", "flags"),
    [
        ("matrix", ["--json", "--explain", "--since"]),
        ("render", ["--check"]),
        ("push", ["--git-ref", "--default-branch", "--commit"]),
        ("package-diff", ["--before", "--after"]),
        (
            "build",
            ["--cuda", "--torch", "--tf", "--python", "--flavor", "--mirror", "--dry-run", "--ca-bundle", "--netrc"],
        ),
    ],
)
def test_every_task_and_flag_has_help(invoke: Cli, task: str, flags: list[str]) -> None:
    result = invoke(task, "--help")
    assert result.returncode == 0, result.stderr
    assert f"Usage: inv[oke] [--core-opts] {task}" in result.stdout
    docstring, options = result.stdout.split("Docstring:", 1)[1].split("Options:", 1)
    assert docstring.strip(), f"{task} has no docstring"
    for flag in flags:
        # e.g. "  --cuda=VERSION        CUDA version, e.g. 11.8 ...": help text follows the flag.
        pattern = rf"^\s+{flag}(=\S+)?\s{{2,}}\S"
        assert re.search(pattern, options, re.MULTILINE), f"{task} {flag} has no help text"


InProcess = Callable[..., tuple[int | str | None, str, str]]


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> InProcess:
    """Run a command line in this process: (exit code, stdout, stderr). The program is Invoke's own (or, with
    program=dlimages.cli.program, the `dlimages` one), loading tasks.py from the repo as on a terminal; for cases
    that stop before any command runs, without a Python start each."""

    def run(*args: str, program: Program | None = None) -> tuple[int | str | None, str, str]:
        monkeypatch.chdir(REPO)
        with pytest.raises(SystemExit) as stopped:
            (program or Program()).run(["invoke", *args])
        captured = capsys.readouterr()
        return stopped.value.code, captured.out, captured.err

    return run


@pytest.mark.parametrize(
    ("args", "problems"),
    [
        pytest.param(
            ["smoke", "--image=--help", "--image", "", "--image", "lab/x:v1 -v"],
            ["--image '--help': starts with '-'", "--image '': is empty", "--image 'lab/x:v1 -v': has whitespace"],
            id="smoke",
        ),
        pytest.param(["bench", "--image=--help"], ["--image '--help': starts with '-'"], id="bench"),
        pytest.param(["test", "--image", ""], ["--image '': is empty"], id="test"),  # was: "6 passed, 31 skipped"
        pytest.param(
            ["push", "--registry", "127.0.0.1:5000", "--image=--help", "--image", "lab/x:v\u00e9"],
            ["image '--help': starts with '-'", "image 'lab/x:v\u00e9': has whitespace or characters outside"],
            id="push",
        ),
        pytest.param(
            ["push", "--registry", "127.0.0.1:5000", "--retries", "x"],  # was: Invoke's ValueError traceback
            ["--retries: is 'x' (allowed: a whole number from 0 to 10)"],
            id="push-retries",
        ),
        pytest.param(
            ["build", "--jobs", "abc", "--dry-run"],  # was: Invoke's ValueError traceback, exit 1
            ["--jobs: is 'abc', not a whole number from 1 to 64 in ASCII digits"],
            id="build-jobs",
        ),
        pytest.param(
            ["build", "--jobs", "\uff11", "--dry-run"],  # was: read as 1 (Invoke's int() takes fullwidth digits)
            ["--jobs: is '\uff11', not a whole number from 1 to 64 in ASCII digits"],
            id="build-jobs-fullwidth",
        ),
    ],
)
def test_bad_flag_values_are_refused_before_anything_runs(
    in_process: InProcess, args: list[str], problems: list[str]
) -> None:
    # Before: docker read --image=--help as its own option and smoke reported "exit 0 (passed)".
    code, out, err = in_process(*args)
    assert (code, out) == (2, "")  # no docker run, no pytest, no push
    errors = err.splitlines()
    assert len(errors) == len(problems), err
    for error, problem in zip(errors, problems, strict=True):
        assert error.startswith(f"error: {problem}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bogus"], "No idea what 'bogus' is!"),
        (["smoke", "--bogus"], "No idea what '--bogus' is!"),
        (["-T", "x", "matrix"], "a flag value has the wrong type (invalid literal for int() with base 10: 'x')"),
    ],
    ids=["unknown-task", "unknown-flag", "wrong-type"],
)
def test_the_dlimages_command_exits_2_where_invoke_exits_1(
    in_process: InProcess, args: list[str], message: str
) -> None:
    # Invoke exits 1 (for a core flag of the wrong type, with a traceback) on a command line it cannot parse, and
    # has no setting to change that; `dlimages` ([project.scripts]) is the same program and tasks.py with exit 2.
    from dlimages.cli import program

    assert in_process(*args, program=program) == (2, "", f"error: {message}\n")
    if args[0] != "-T":
        assert in_process(*args)[0] == 1


def test_help_never_runs_a_task_and_no_letter_means_two_flags(invoke: Cli, tmp_path: Path) -> None:
    """Before: `invoke apt-repo --help` took `--help` as the folder to fill (its one positional argument) and
    downloaded 82 MB into a folder named `--help`; `invoke lock -h` ran `lock --check` (Invoke gave `-h` to
    --check, -c being --cuda's); -t meant --torch, --to, --tlog or --retries, by task."""
    listed = invoke("--list", "--list-format", "json")
    names = [task["name"] for task in json.loads(listed.stdout)["tasks"]]
    assert "apt-repo" in names and "lock" in names
    before = sorted(path.name for path in REPO.iterdir())
    for name in names:
        for asked in ("--help", "-h"):
            shown = invoke(name, asked)
            assert shown.returncode == 0 and shown.stdout.startswith(f"Usage: inv[oke] [--core-opts] {name} ")
            options = shown.stdout.split("Options:", 1)[-1]
            assert not re.search(r"^\s+-\w[ ,]", options, re.MULTILINE), f"{name} has a one-letter flag"
    assert sorted(path.name for path in REPO.iterdir()) == before
    missing = invoke("apt-repo")
    assert missing.returncode == 2 and "--to: is empty" in missing.stderr


def test_a_listing_piped_into_head_ends_quietly() -> None:
    """Before: `invoke matrix --json | head` ended in a BrokenPipeError traceback."""
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "matrix", "--json"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as listing:
        assert listing.stdout is not None and listing.stderr is not None
        assert listing.stdout.read(1) == b"["
        listing.stdout.close()  # as `head -c 1` does
        said = listing.stderr.read().decode()
        assert listing.wait(timeout=120) == 0 and said == "", said


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Before: proved nothing and said "0 of 0 locked cells import their framework", exit 0.
        (["--cuda", "11.8", "--torch", "2.1", "--python", "3.10"], "none of the 1 selected cells has a lock to prove"),
        (["--check"], "--prove: given with --check"),  # before: --check was ignored without a word
        (["--upgrade-apt", "--timeout", "5"], "--prove: given with --upgrade-apt, --timeout"),
    ],
)
def test_lock_prove_that_would_prove_nothing_or_ignore_a_flag_is_refused(
    invoke: Cli, args: list[str], says: str
) -> None:
    done = invoke("lock", "--prove", *args)
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_verify_of_a_name_without_a_registry_is_refused_before_any_pull(invoke: Cli) -> None:
    # Before: `invoke verify --image lab/x:v1` pulled docker.io/lab/x:v1, a namespace anyone can register.
    done = invoke("verify", "--image", "lab/x:v1", "--key", "cosign.pub", "--no-engine-setup")
    assert done.returncode == 2 and "'lab/x:v1' names no registry (docker would pull it from Docker Hub)" in done.stderr
