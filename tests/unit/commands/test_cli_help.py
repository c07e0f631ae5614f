"""What the command line shows and accepts before any task runs, for every task: help (-h and --help alike, every
flag with help and a name for its value, no fragment of Invoke's formatting), `--list` lines that are whole
sentences, one meaning per short flag, Invoke's core options a task would ignore refused, and `dlimages` from any
folder. In this process (Invoke's Program, or the `dlimages` one), loading tasks.py as on a terminal."""

from __future__ import annotations

import getpass
import inspect
import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from invoke import Collection, FilesystemLoader, Program
from invoke.parser import Argument, ParserContext

import dlimages.cli
from dlimages.cli import program as dlimages_program

REPO = Path(__file__).resolve().parents[3]
ARTEFACTS = ("--,", "--=", "=STRING", "=INT", "[=", " STRING", " INT")  # Invoke's own, or halves of a flag

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """A command line run in this process from `cwd` (default: the repo root): (exit code, stdout, stderr)."""

    def call(*args: str, program: Program | None = None, cwd: Path = REPO) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "path", list(sys.path))  # Invoke puts the folder of tasks.py first
        code: int = 0
        try:
            (program or Program(name="Invoke", binary="inv[oke]")).run(["invoke", *args])
        except SystemExit as stopped:
            code = stopped.code if isinstance(stopped.code, int) else (0 if stopped.code is None else 1)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def namespace(monkeypatch: pytest.MonkeyPatch) -> Collection:
    """tasks.py's tasks, as Invoke loads them."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    module, parent = FilesystemLoader(start=str(REPO)).load("tasks")
    return Collection.from_module(module, loaded_from=parent)


def short_flag_meanings(contexts: Iterable[ParserContext]) -> dict[str, set[str]]:
    """Each short flag (-c) with the long flags it stands for, across the contexts (tasks, Invoke's core options)."""
    meanings: dict[str, set[str]] = defaultdict(set)
    for context in contexts:
        for argument in context.args.values():
            names = context.names_for(f"--{argument.names[0]}" if len(argument.names[0]) > 1 else argument.names[0])
            long = ", ".join(sorted(name for name in names if name.startswith("--")))
            for name in names:
                if re.fullmatch(r"-\w", name):
                    meanings[name].add(long)
    return {short: longs for short, longs in meanings.items() if len(longs) > 1}


def test_the_short_flag_check_finds_a_letter_with_two_meanings() -> None:
    cuda = ParserContext("build", args=[Argument(names=("cuda", "c"))])
    core = ParserContext(args=[Argument(names=("collection", "c")), Argument(names=("debug", "d"), kind=bool)])
    assert short_flag_meanings([cuda, core]) == {"-c": {"--cuda", "--collection"}}


def test_no_short_flag_has_two_meanings(namespace: Collection) -> None:
    contexts = [*namespace.to_contexts(), ParserContext(args=Program().core_args())]
    assert short_flag_meanings(contexts) == {}


def test_every_flag_of_every_task_has_help_and_names_its_value(namespace: Collection) -> None:
    contexts = namespace.to_contexts()
    assert len(contexts) > 15
    for _ in range(2):  # a second parse (the dlimages program run twice) has the same help: Invoke's took it away
        for context in namespace.to_contexts():
            for argument in context.args.values():
                flag = f"--{argument.names[0]}"
                names, text = context.help_for(flag)
                assert text.strip(), f"{context.name} {flag} has no help"
                assert not any(part in names for part in ARTEFACTS), f"{context.name}: {names}"
                if argument.kind is not bool:
                    assert re.fullmatch(rf"{flag}=\S+", names), f"{context.name}: {names} names no value"


def test_every_task_help_is_whole_and_the_same_for_h_and_help(run: Run, namespace: Collection) -> None:
    assert len(namespace.task_names) > 15
    for name, aliases in namespace.task_names.items():
        code, shown, err = run(name, "--help")
        assert (code, err) == (0, ""), name
        for same in ("-h", *aliases):  # `invoke bases` is `invoke bases.list`
            assert run(*([name, same] if same == "-h" else [same, "--help"])) == (0, shown, ""), f"{name}: {same}"
        assert shown.startswith(f"Usage: inv[oke] [--core-opts] {name} ")
        options = shown.split("\nOptions:\n", 1)[1]
        assert not any(part in options for part in ARTEFACTS), f"{name}:\n{options}"
        for line in options.splitlines():
            if line.startswith("  -"):  # "  --cuda=VERSION   CUDA version, ...": help on the flag's line
                assert re.fullmatch(r"  -\S+ {2,}\S.*", line), f"{name}: {line!r} has no help"
    code, shown, _ = run("build", "--help", program=dlimages_program)
    assert code == 0 and shown == run("build", "--help")[1].replace("inv[oke]", "dlimages")


def test_using_md_lists_every_task_and_flag_as_help_shows_them(run: Run, namespace: Collection) -> None:
    """docs/using.md's generated block (commands.flags_block) against each task's --help: the same tasks, the same
    flags with the same value names. `invoke render --check` keeps the block fresh; this keeps it whole."""
    block = (REPO / "docs/using.md").read_text().split("<!-- flags:begin -->", 1)[1].split("<!-- flags:end -->")[0]
    listed = dict(re.findall(r"^### `invoke (\S+)`\n(.*?)(?=^### |\Z)", block, re.M | re.S))
    assert set(listed) == set(namespace.task_names) and len(listed) > 15, sorted(listed)
    for name in namespace.task_names:
        options = run(name, "--help")[1].split("\nOptions:\n", 1)[1]
        shown = set(re.findall(r"^  (--[a-z][^ ]*)", options, re.M)) - {"--help"}
        documented = {flag.replace("\\|", "|") for flag in re.findall(r"^\| `(--[^`]+)`", listed[name], re.M)}
        assert documented == shown and (shown or "No flags." in listed[name]), name


def test_list_shows_each_task_in_one_whole_sentence(run: Run, namespace: Collection) -> None:
    """Before: `ci`'s first docstring line, all that --list shows of it, stopped at "..., the user's"."""
    tasks = [namespace[name] for name in namespace.task_names]
    assert len(tasks) > 15
    for task in tasks:
        lines = (inspect.getdoc(task) or "").splitlines()
        assert lines and lines[0].endswith("."), f"{task.name}: {lines[:1]}"
        assert len(lines) == 1 or not lines[1].strip(), f"{task.name}: its first line goes on: {lines[:2]}"
    tree = json.loads(run("--list", "--list-format", "json")[1])
    shown = [task["help"] for node in (tree, *tree["collections"]) for task in node["tasks"]]
    assert len(shown) == len(tasks) and all(line.endswith(".") for line in shown), shown


def _written(root: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for folder in ("images", "docs") for path in (root / folder).rglob("*")}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(  # before: wrote 6 files
            ["-R", "render"],
            "error: -R/--dry (Invoke's run.dry): `invoke render` would ignore it: it runs its commands through "
            "dlimages, not through Invoke (allowed: leave it out; `invoke render --check` writes nothing)",
            id="dry-render",
        ),
        pytest.param(["-R", "build", "--cuda", "11.8"], "`invoke build --dry-run` prints the commands", id="dry-build"),
        pytest.param(["-e", "matrix"], "error: -e/--echo (Invoke's run.echo): `invoke matrix` would", id="echo"),
        pytest.param(["-w", "build", "--dry-run"], "-w/--warn-only (Invoke's run.warn)", id="warn"),
        pytest.param(["--hide", "both", "matrix"], "--hide (Invoke's run.hide)", id="hide"),
        pytest.param(["-T", "5", "disk"], "-T/--command-timeout (Invoke's timeouts.command)", id="timeout"),
        pytest.param(["-p", "check"], "error: -p/--pty (Invoke's run.pty): `invoke check` would ignore it (", id="pty"),
        pytest.param(["-R", "test"], "error: -R/--dry (Invoke's run.dry): `invoke test` would ignore it (", id="test"),
        pytest.param(["-R", "bases.list"], "`invoke bases.list` would ignore it", id="subcollection"),
    ],
)
def test_core_options_a_task_would_ignore_are_refused(run: Run, args: list[str], says: str) -> None:
    before = _written(REPO)
    for program in (None, dlimages_program):
        code, out, err = run(*args, program=program)
        assert (code, out) == (2, ""), err
        assert says in err and "Traceback" not in err
    assert _written(REPO) == before


def test_a_core_option_set_in_invokes_configuration_is_refused_too(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INVOKE_RUN_ECHO", "1")
    code, _, err = run("matrix")
    assert code == 2 and err.startswith("error: -e/--echo (Invoke's run.echo): `invoke matrix` would ignore it")


def test_check_honours_dry_by_printing_its_commands(run: Run) -> None:
    code, out, _ = run("-R", "check")
    assert code == 0
    assert "##### lint: " in out and "##### unit and GPU tests: " in out
    assert out.count("-m pytest ") == 2  # the header, then Invoke's echo of the command it did not run


def test_dlimages_refuses_a_sudo_password_before_asking_for_it(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def prompt(*_: object) -> str:
        raise AssertionError("asked for a password")

    monkeypatch.setattr(getpass, "getpass", prompt)
    code, out, err = run("--prompt-for-sudo-password", "matrix", program=dlimages_program)
    assert (code, out) == (2, "")
    assert err.startswith("error: --prompt-for-sudo-password: no task runs sudo through Invoke")


def test_dlimages_runs_this_repositorys_tasks_from_any_folder(run: Run, tmp_path: Path) -> None:
    """Before: `cd /tmp && dlimages --list` said "Can't find any collection named 'tasks'!"."""
    (tmp_path / "tasks.py").write_text("from invoke import task\n\n\n@task\ndef hello(c):\n    print('hello')\n")
    for cwd in (tmp_path, tmp_path.parent):  # another project's tasks.py; none at all
        code, out, err = run("--list", program=dlimages_program, cwd=cwd)
        assert (code, err) == (0, "")
        assert "\n  build " in out and "hello" not in out
    assert run("--list", cwd=tmp_path)[1].split() == ["Available", "tasks:", "hello"]  # invoke's search, unchanged
    code, out, _ = run("-r", str(tmp_path), "--list", program=dlimages_program, cwd=REPO)
    assert code == 0 and "hello" in out  # --search-root as given


def test_dlimages_outside_a_clone_says_what_to_do(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dlimages.cli, "PACKAGE", tmp_path / "site-packages/dlimages")
    code, out, err = run("--list", program=dlimages_program, cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: no dlimages tasks.py in {tmp_path} or above, and this dlimages (")
    assert "(allowed: run it in a clone, or install one with `pip install -e CLONE`)" in err
