"""tasks.py over dlimages.commands: each task's flags are its command's keyword-only parameters (the five cell flags
in the place of `cells`), lists are repeatable, and the task file stays thin (issue 18: a body calls one function)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from invoke.loader import FilesystemLoader
from invoke.tasks import Task

from dlimages import commands
from dlimages.commands.flags import EVERY_CELL_HELP, CellFlags, flag_help, flag_parameters, gather, repeatable

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "tasks.py"
CELL_FLAGS = ["cuda", "torch", "tf", "python", "flavor"]


@pytest.fixture
def tasks(monkeypatch: pytest.MonkeyPatch) -> dict[str, Task]:
    """The tasks of tasks.py by function name, loaded as Invoke loads them (which puts the repo first on sys.path
    and the module in sys.modules: both put back afterwards)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "tasks", raising=False)
    module, _ = FilesystemLoader(start=str(REPO)).load("tasks")
    del sys.modules["tasks"]
    return {name: value for name, value in vars(module).items() if isinstance(value, Task)}


def test_each_task_has_exactly_the_flags_of_its_command_in_their_order(tasks: dict[str, Task]) -> None:
    assert len(tasks) == 21
    for name, task in tasks.items():
        arguments = task.get_arguments()  # once: Invoke hands each flag its help as it makes the arguments
        declared = [param.name for param in flag_parameters(getattr(commands, name))]
        positional = [argument.name for argument in arguments if argument.positional]  # Invoke puts these first
        assert [argument.name for argument in arguments] == positional + [n for n in declared if n not in positional]
        assert all(argument.help for argument in arguments), f"{name}: a flag without help"


def test_cells_stands_for_the_five_cell_flags_where_it_is() -> None:
    assert [param.name for param in flag_parameters(commands.bases_mirror)][:6] == ["to", *CELL_FLAGS]
    assert [param.name for param in flag_parameters(commands.build)][:6] == [*CELL_FLAGS, "mirror"]
    assert "cuda" not in [param.name for param in flag_parameters(commands.push)]


@pytest.mark.parametrize(
    ("command", "lists"),
    [
        (commands.push, ["registry", "image"]),
        (commands.bases_mirror, ["image"]),
        (commands.lock, ["upgrade_package"]),
        (commands.build, []),
        (commands.bench, []),  # one --image: a str, not a list
    ],
)
def test_flags_typed_as_a_sequence_are_repeatable(command: object, lists: list[str]) -> None:
    assert repeatable(command) == lists  # type: ignore[arg-type]


def test_a_flags_help_and_value_name_are_on_its_parameter_shared_ones_once() -> None:
    repro, build = flag_help(commands.repro), flag_help(commands.build)
    assert repro["mirror"] == build["mirror"] and build["mirror"].value == "PROFILE"  # `Mirror | None` in repro
    assert repro["no_engine_setup"] == flag_help(commands.push)["no_engine_setup"]
    cell_help = CellFlags.help()  # the Help on CellFlags' fields
    assert (build["cuda"], build["flavor"]) == (cell_help["cuda"], cell_help["flavor"])  # `cells: CellFlags`
    assert flag_help(commands.lock)["flavor"] == EVERY_CELL_HELP["flavor"] != cell_help["flavor"]  # `cells: EveryCell`
    assert "cuda" not in flag_help(commands.push)


def test_cell_flags_are_gathered_into_one_value_and_only_where_all_five_are() -> None:
    given = {"to": "r", "cuda": "11.8", "torch": None, "tf": None, "python": "3.10", "flavor": None}
    assert gather(commands.bases_mirror, given) == {"to": "r", "cells": CellFlags(cuda="11.8", python="3.10")}
    assert gather(commands.test, {"image": ["x"]}) == {"image": ["x"]}
    assert CellFlags(torch="2.1").given() == {
        "--cuda": None,
        "--torch": "2.1",
        "--tf": None,
        "--python": None,
        "--flavor": None,
    }


def test_the_task_file_stays_thin(tasks: dict[str, Task]) -> None:
    text = TASKS.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in tasks:
            first = node.body[1] if ast.get_docstring(node) else node.body[0]
            assert node.end_lineno is not None and node.end_lineno - first.lineno + 1 <= 12, node.name


def test_test_without_the_test_tools_names_the_extra_and_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlimages.commands import images
    from dlimages.commands.session import Failed

    monkeypatch.setattr(images, "TEST_TOOLS", ("pytest", "dlimages_no_such_test_tool"))
    with pytest.raises(Failed) as raised:
        images.test(REPO, None, image=["any:ref"])  # type: ignore[arg-type]  # the shell is never reached
    assert raised.value.code == 2
    assert "dlimages_no_such_test_tool, not installed here: pip install -e '.[test]'" in raised.value.message
    assert "pytest," not in raised.value.message  # only what is missing


@pytest.mark.parametrize(
    ("compression", "store", "says"),
    [("zstd", "overlay2", "--compression zstd"), ("gzip", "containerd", "a push from the containerd image store")],
)
def test_a_push_that_needs_skopeo_says_so_before_anything_is_pushed(
    monkeypatch: pytest.MonkeyPatch, compression: str, store: str, says: str
) -> None:
    from dlimages.commands import images
    from dlimages.commands.session import Failed

    monkeypatch.setattr(images, "engine", lambda *_args, **_kw: None)
    monkeypatch.setattr(images, "image_store", lambda _runner: store)
    monkeypatch.setattr(images.shutil, "which", lambda _name: None)
    monkeypatch.setattr(images, "push_image", lambda *_a, **_kw: pytest.fail("pushed without skopeo"))
    with pytest.raises(Failed) as raised:
        images.push(REPO, registry=["127.0.0.1:5000"], image=["lab/x:v1"], compression=compression, no_sign=True)
    assert raised.value.code == 2
    assert raised.value.message.startswith(f"error: {says} copies the compressed layers with skopeo, not installed")


def test_the_test_tools_are_the_test_extra_and_not_the_main_install() -> None:
    import tomllib

    from dlimages.commands.images import TEST_TOOLS

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ \[]", d)[0] for d in project["optional-dependencies"]["test"]}
    assert names == {"pytest", "pytest-testinfra", "selenium", "packageurl-python"}
    imported = {"pytest": "pytest", "pytest-testinfra": "testinfra", "selenium": "selenium"}
    assert {imported.get(n, "packageurl") for n in names} == set(TEST_TOOLS)
    assert not names & {re.split(r"[<>=!~ \[]", d)[0] for d in project["dependencies"]}
    assert "dlimages[test]" in project["optional-dependencies"]["dev"]
