"""The flags of the tasks, read from the commands themselves: a command's keyword-only parameters are its task's
flags (name, type, default, order, and on its annotation a Help: help text and value name), so tasks.py declares
none of them a second time. Flags that go together travel as one value (FlagGroup: the five cell flags, the trust
flags). Also the flags several commands share, and Invoke's core options that a task would ignore, refused."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from invoke.config import Config
from invoke.parser.argument import Argument
from invoke.parser.context import ParserContext
from invoke.tasks import Task

from dlimages.building.engine import NO_SETUP_HELP
from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.references import names_registry
from dlimages.model.selection import Selection
from dlimages.publish.signing import IDENTITY_ENV, ISSUER_ENV, VERIFY_KEY_ENV, Trust

REGISTRY = "HOST[:PORT][/PATH]"


@dataclass(frozen=True)
class Help:
    """A flag's help, on its command's parameter (`mirror: Annotated[str, Help("mirror profile...", "PROFILE")]`),
    and the name help gives its value (`--mirror=PROFILE`; None: the flag's name in capitals). A function of the
    repository's root where the help reads the project."""

    text: str | Callable[[Path], str]
    value: str | None = None


# The flags of commands in several modules (a module's own shared flags are declared in it, e.g. builds.Mirror).
NoEngineSetup = Annotated[bool, Help(NO_SETUP_HELP)]
AptFrom = Annotated[str | None, Help(usage.APT_FROM_HELP, "SOURCE")]
NO_VERIFY_SKIPS = "the signature, the SBOM and the provenance are not checked, and the image runs by its tag"


@dataclass(frozen=True)
class FlagGroup:
    """Flags that travel as one value: a command's parameter typed as a group has the group's fields as flags in its
    place, with their defaults and the Help on each field (or those a Mapping on its annotation names, with that
    help: `Annotated[TrustFlags, TrustFlags.help("tlog")]` is --tlog alone); `gather` folds them back."""

    @classmethod
    def help(cls, *names: str) -> dict[str, Help]:
        """The Help on each field (those named; default: all), in the fields' order."""
        hints = typing.get_type_hints(cls, include_extras=True)
        return {each.name: hints[each.name].__metadata__[0] for each in fields(cls) if each.name in (names or hints)}


@dataclass(frozen=True)
class CellFlags(FlagGroup):
    """--cuda, --torch, --tf, --python and --flavor as typed (None: not given); checked by `selection()`."""

    cuda: Annotated[str | None, Help("CUDA version, e.g. 11.8 (default: every CUDA version)", "VERSION")] = None
    torch: Annotated[
        str | None, Help("PyTorch version; partial picks the newest patch, e.g. 2.1 -> 2.1.2", "VERSION")
    ] = None
    tf: Annotated[
        str | None, Help("TensorFlow version; partial picks the newest patch, e.g. 2.14 -> 2.14.1", "VERSION")
    ] = None
    python: Annotated[
        str | None,
        Help("Python version, e.g. 3.10 (default: the image's default Python where the cell has it)", "VERSION"),
    ] = None
    flavor: Annotated[str | None, Help("runtime or devel (default: the image's default flavor)", "runtime|devel")] = (
        None
    )

    def selection(self) -> Selection:
        return Selection.from_flags(self.cuda, self.torch, self.tf, self.python, self.flavor)

    def given(self) -> dict[str, str | None]:
        """Each flag as typed on the command line ("--cuda") with its value."""
        return {f"--{each.name}": getattr(self, each.name) for each in fields(self)}


@dataclass(frozen=True)
class TrustFlags(FlagGroup):
    """--key, --identity, --issuer, --tlog and --no-verify as typed: whom an image must be signed by (`against()`)."""

    key: Annotated[
        str | None,
        Help(
            f"cosign public key the signature must verify against: file, KMS URI or env://VAR (${VERIFY_KEY_ENV})",
            "KEY",
        ),
    ] = None
    identity: Annotated[
        str | None,
        Help(
            rf"keyless: regex the signer's identity must match, e.g. ^https://github\.com/ORG/REPO/ (${IDENTITY_ENV})",
            "REGEX",
        ),
    ] = None
    issuer: Annotated[
        str | None, Help(f"keyless: the identity's OIDC issuer (default: GitHub Actions'; ${ISSUER_ENV})", "URL")
    ] = None
    tlog: Annotated[
        bool, Help("require (push: upload) the transparency log entry; without it a key's signature is checked offline")
    ] = False
    no_verify: Annotated[bool, Help(f"run without verifying: {NO_VERIFY_SKIPS}")] = False

    def against(self, refs: Sequence[str]) -> Trust | None:
        """What the refs are verified against (exit 2 before anything runs when a registry ref has nothing to check
        against); None with --no-verify."""
        if self.no_verify:
            if self.key or self.identity:
                given = "--key" if self.key else "--identity"
                raise InputError([Problem("--no-verify", f"given with {given}", "one of them")])
            return None
        if not any(map(names_registry, refs)):
            return Trust(self.key, self.identity, self.issuer or "")  # local images only: nothing to verify against
        return Trust.from_flags(self.key, self.identity, self.issuer, self.tlog)


ANY_CELL, NO_TRUST_FLAG = CellFlags(), TrustFlags()  # no flag of the group given
EVERY_CELL_HELP = {  # the cell flags where a flag left out means every value (lock, bases)
    **CellFlags.help(),
    "python": Help("Python version, e.g. 3.10 (default: every Python)", "VERSION"),
    "flavor": Help("runtime or devel (default: both)", "runtime|devel"),
}
EveryCell = Annotated[CellFlags, EVERY_CELL_HELP]  # `cells: EveryCell`: the cell flags with EVERY_CELL_HELP


def flag_parameters(command: Callable[..., object]) -> list[inspect.Parameter]:
    """The command's flags in order (Invoke hands out short flags in this order): its keyword-only parameters, a
    group's flags in its place."""
    keyword, groups = inspect.Parameter.KEYWORD_ONLY, _groups(command)
    declared = [param for param in inspect.signature(command).parameters.values() if param.kind is keyword]
    flags = {
        name: [inspect.Parameter(f.name, keyword, default=f.default) for f in fields(group) if f.name in helps]
        for name, (group, helps) in groups.items()
    }
    return [each for param in declared for each in flags.get(param.name, [param])]


def gather(command: Callable[..., object], given: dict[str, Any]) -> dict[str, Any]:
    """Flag values by name, as `command` takes them: each group's flags folded into one value of its group."""
    groups = _groups(command)
    rest = {name: value for name, value in given.items() if not any(name in helps for _, helps in groups.values())}
    return rest | {name: group(**{flag: given[flag] for flag in helps}) for name, (group, helps) in groups.items()}


def _groups(command: Callable[..., object]) -> dict[str, tuple[type[FlagGroup], Mapping[str, Help]]]:
    """The command's parameters that are groups of flags, each with its group and its flags' Help by name."""
    found = {}
    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        group, *extras = typing.get_args(hint) if typing.get_origin(hint) is Annotated else (hint,)
        if isinstance(group, type) and issubclass(group, FlagGroup):
            found[name] = (group, next((each for each in extras if isinstance(each, Mapping)), group.help()))
    return found


def repeatable(command: Callable[..., object]) -> list[str]:
    """The flags that take a list, given once per value (--image A --image B): those typed as a Sequence."""
    hints = typing.get_type_hints(command)
    return [param.name for param in flag_parameters(command) if _is_sequence(hints.get(param.name))]


def flag_help(command: Callable[..., object]) -> dict[str, Help]:
    """Each flag's Help by name, from the command's annotations (a group's flags': from the group)."""
    found = {flag: each for _, helps in _groups(command).values() for flag, each in helps.items()}
    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        extras = [each for option in _options(hint) for each in getattr(option, "__metadata__", ())]
        found.update((name, each) for each in extras if isinstance(each, Help))
    return found


def _options(hint: object) -> tuple[object, ...]:
    """A union's options (`Mirror | None`: Mirror, None), else the hint alone."""
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _is_sequence(hint: object) -> bool:
    return any(typing.get_origin(option) is Sequence for option in _options(hint))


class Flag(Argument):
    """Invoke's Argument that names its value: help shows `--cuda=VERSION`, where Invoke writes STRING or INT (or,
    for a repeatable flag, nothing, as for a switch)."""

    def __init__(self, argument: Argument, placeholder: str) -> None:
        keep = ("names", "kind", "default", "help", "positional", "optional", "incrementable", "attr_name")
        super().__init__(**{name: getattr(argument, name) for name in keep})
        self.placeholder = placeholder


class FlagTask(Task[Any]):
    """Invoke's Task with the flags of `command` (the body's signature): their help and value names from its
    annotations (a Help's function read for `root`), repeatable where typed as a Sequence. It keeps their help:
    Invoke's get_arguments takes each help out of the task, a second parse had none."""

    def __init__(self, body: Callable[..., Any], *, command: Callable[..., object], root: Path, **options: Any) -> None:
        helps = flag_help(command)
        texts = {name: _text(each, root) for name, each in helps.items()}
        super().__init__(body, help=texts, iterable=repeatable(command), **options)
        self.placeholders = {name: each.value for name, each in helps.items() if each.value}

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


def flag_rows(command: Callable[..., object], root: Path) -> list[tuple[str, str, str]]:
    """Each flag of `command` as docs/using.md lists it: the flag (with its value's name), its default, its help."""
    helps, rows = flag_help(command), []
    for param in flag_parameters(command):
        each, flag = helps.get(param.name, Help("")), param.name.strip("_").replace("_", "-")  # as Invoke names it
        switch = isinstance(param.default, bool)
        value = "" if switch else f"={each.value or flag.upper()}"
        default = "" if switch or param.default in (None, (), "", param.empty) else f"`{param.default}`"
        rows.append((f"`--{flag}{value}`", default, _text(each, root)))
    return rows


@functools.cache  # once a process: --mirror's (build, bake, repro) reads matrix.yaml
def _text(flag: Help, root: Path) -> str:
    return flag.text if isinstance(flag.text, str) else flag.text(root)


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
    dry_run = f"; `{line} --dry-run` prints the commands and runs none" if "dry_run" in flags else ""
    check = f"; `{line} --check` writes nothing" if "check" in flags else ""
    own = {
        "dry": f"leave it out{dry_run}{check}",
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
