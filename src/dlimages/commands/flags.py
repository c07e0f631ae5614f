"""The flags of the tasks, read from the commands themselves: a command's keyword-only parameters are its task's
flags (name, type, default, order), so tasks.py declares none of them a second time. The five cell-selection
flags travel together as one CellFlags. Also what help shows of the flags (their help where tasks share it, the name
of each flag's value) and Invoke's core options that a task would ignore, refused."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from invoke.config import Config
from invoke.parser.argument import Argument
from invoke.parser.context import ParserContext
from invoke.tasks import Task

from dlimages.core.errors import InputError, Problem
from dlimages.model.selection import Selection

CELL_HELP = {  # the cell-selection flags (CellFlags), for the tasks that build or describe one cell each
    "cuda": "CUDA version, e.g. 11.8 (default: every CUDA version)",
    "torch": "PyTorch version; partial picks the newest patch, e.g. 2.1 -> 2.1.2",
    "tf": "TensorFlow version; partial picks the newest patch, e.g. 2.14 -> 2.14.1",
    "python": "Python version, e.g. 3.10 (default: the image's default Python where the cell has it)",
    "flavor": "runtime or devel (default: the image's default flavor)",
}
EVERY_CELL_HELP = {  # the same flags where a flag left out means every value (lock, bases)
    **CELL_HELP,
    "python": "Python version, e.g. 3.10 (default: every Python)",
    "flavor": "runtime or devel (default: both)",
}
REGISTRY = "HOST[:PORT][/PATH]"
PLACEHOLDERS = {  # a flag's value as help names it (`--cuda=VERSION`), where the flag's own name says less
    **dict.fromkeys(("cuda", "torch", "tf", "python", "toolkit"), "VERSION"),
    **dict.fromkeys(("registry", "base_registry"), REGISTRY),
    **dict.fromkeys(("ca_bundle", "netrc", "out", "report", "nodes", "dockerfile"), "FILE"),
    **dict.fromkeys(("context", "before", "after"), "FOLDER"),
    **dict.fromkeys(("jobs", "retries"), "N"),
    **dict.fromkeys(("sign_key", "key"), "KEY"),
    "flavor": "runtime|devel",
    "mirror": "PROFILE",
    "cache_from": "CACHE",
    "cache_to": "CACHE",
    "apt_from": "SOURCE",
    "against": "IMAGE",
    "upgrade_package": "PACKAGE",
    "timeout": "SECONDS",
    "since": "COMMIT",
    "git_ref": "REF",
    "default_branch": "BRANCH",
    "commit": "SHA",
    "compression": "gzip|zstd",
    "identity": "REGEX",
    "issuer": "URL",
    "batch_size": "SIZE",
    "modes": "MODE,...",
    "gpus": "all|N",
    "gpu": "GPU,...",
    "driver": "VERSION|BRANCH",
    "need": "GB",
}


@dataclass(frozen=True)
class CellFlags:
    """--cuda, --torch, --tf, --python and --flavor as typed (None: not given); checked by `selection()`. A command
    with a `cells: CellFlags` parameter has these five flags in its place."""

    cuda: str | None = None
    torch: str | None = None
    tf: str | None = None
    python: str | None = None
    flavor: str | None = None

    @classmethod
    def names(cls) -> list[str]:
        return [field.name for field in fields(cls)]

    @classmethod
    def take(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Flag values by name, the five cell flags (where they are) replaced by one `cells`."""
        if not set(cls.names()) <= set(given):
            return given
        rest = {name: value for name, value in given.items() if name not in cls.names()}
        return {**rest, "cells": cls(**{name: given[name] for name in cls.names()})}

    def selection(self) -> Selection:
        return Selection.from_flags(self.cuda, self.torch, self.tf, self.python, self.flavor)

    def given(self) -> dict[str, str | None]:
        """Each flag as typed on the command line ("--cuda") with its value."""
        return {f"--{name}": getattr(self, name) for name in self.names()}


ANY_CELL = CellFlags()  # no cell flag given


def flag_parameters(command: Callable[..., object]) -> list[inspect.Parameter]:
    """The command's flags in order (Invoke hands out short flags in this order): its keyword-only parameters,
    `cells` as the five cell flags."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    declared = [param for param in inspect.signature(command).parameters.values() if param.kind is keyword]
    cells = [inspect.Parameter(name, keyword, default=None) for name in CellFlags.names()]
    return [each for param in declared for each in (cells if param.name == "cells" else [param])]


def repeatable(command: Callable[..., object]) -> list[str]:
    """The flags that take a list, given once per value (--image A --image B): those typed as a Sequence."""
    hints = typing.get_type_hints(command)
    return [param.name for param in flag_parameters(command) if _is_sequence(hints.get(param.name))]


def _is_sequence(hint: object) -> bool:
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return any(typing.get_origin(option) is Sequence for option in (typing.get_args(hint) if union else (hint,)))


class Flag(Argument):
    """Invoke's Argument that names its value: help shows `--cuda=VERSION`, where Invoke writes STRING or INT (or,
    for a repeatable flag, nothing, as for a switch)."""

    def __init__(self, argument: Argument, placeholder: str) -> None:
        keep = ("names", "kind", "default", "help", "positional", "optional", "incrementable", "attr_name")
        super().__init__(**{name: getattr(argument, name) for name in keep})
        self.placeholder = placeholder


class FlagTask(Task[Any]):
    """Invoke's Task whose flags name their values in help (PLACEHOLDERS, then `placeholders`, else the flag's
    name) and keep their help: Invoke's get_arguments takes each help out of the task, a second parse had none."""

    def __init__(self, body: Callable[..., Any], *, placeholders: Mapping[str, str], **options: Any) -> None:
        super().__init__(body, **options)
        self.placeholders = {**PLACEHOLDERS, **placeholders}

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        kept = dict(self.help)
        try:
            arguments = super().get_arguments(ignore_unknown_help)
        finally:
            self.help = kept
        return [
            arg if arg.kind is bool else Flag(arg, self.placeholders.get(str(arg.name), str(arg.names[0]).upper()))
            for arg in arguments
        ]


def _help_for(context: ParserContext, flag: str) -> tuple[str, str]:
    names, text = _INVOKE_HELP_FOR(context, flag)
    argument = context.flags[flag]
    if isinstance(argument, Flag):
        value = argument.placeholder
        spelled = [f"{name} {value}" if len(name) == 2 else f"{name}={value}" for name in context.names_for(flag)]
        names = ", ".join(sorted(spelled, key=len))
    return names, text


# Invoke's help takes a flag's value name from a fixed {str: "STRING", int: "INT"} and offers no hook for it: the
# `invoke` program rebuilds tasks.py's namespace as a plain Collection, whose parser contexts are Invoke's own. So
# help_for is wrapped, for a Flag only; every other flag (Invoke's core options) is shown as Invoke shows it.
_INVOKE_HELP_FOR = ParserContext.help_for
ParserContext.help_for = _help_for  # type: ignore[method-assign,assignment]

RUN_OPTIONS = frozenset({"echo", "warn", "hide", "timeout"})  # what `c.run` honours as check, test and ci call it
CORE_OPTIONS = {  # Invoke's core options for `c.run` (and sudo): the flag, where Invoke's configuration keeps it
    "dry": ("-R/--dry", "run", "dry"),
    "echo": ("-e/--echo", "run", "echo"),
    "warn": ("-w/--warn-only", "run", "warn"),
    "pty": ("-p/--pty", "run", "pty"),
    "hide": ("--hide", "run", "hide"),
    "timeout": ("-T/--command-timeout", "timeouts", "command"),
    "sudo": ("--prompt-for-sudo-password", "sudo", "password"),
}


def refuse_core_options(config: Config, line: str, flags: Collection[str], honours: Collection[str]) -> None:
    """InputError for each of Invoke's core options given (on the command line or in Invoke's configuration) that
    the task `line` would ignore: it runs its commands through dlimages' runner, not through Invoke's `c.run`,
    except those in `honours`."""
    own = {
        "dry": "".join(
            (
                "leave it out",
                f"; `{line} --dry-run` prints the commands and runs none" if "dry_run" in flags else "",
                f"; `{line} --check` writes nothing" if "check" in flags else "",
            )
        ),
        "echo": f"leave it out{'; --dry-run prints the commands' if 'dry_run' in flags else ''}",
        "warn": f"leave it out{'; --keep-going goes on after a failed cell' if 'keep_going' in flags else ''}",
        "pty": "leave it out: dlimages decides which commands run on a terminal",
        "hide": "leave it out; redirect the output instead: > FILE 2>&1",
        "timeout": f"leave it out; `timeout SECONDS {line} ...` bounds the whole task",
        "sudo": "leave it out: no task runs sudo through Invoke; where one needs root, its message says so",
    }
    why = "" if honours else ": it runs its commands through dlimages, not through Invoke"
    problems = [
        Problem(f"{flag} (Invoke's {section}.{key})", f"`{line}` would ignore it{why}", own[option])
        for option, (flag, section, key) in CORE_OPTIONS.items()
        if option not in honours and config[section][key] not in (None, False)
    ]
    if problems:
        raise InputError(problems)
