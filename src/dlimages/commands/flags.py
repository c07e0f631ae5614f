"""The flags of the tasks, read from the commands themselves: a command's keyword-only parameters are its task's
flags (name, type, default, order), so tasks.py declares none of them a second time. The five cell-selection
flags travel together as one CellFlags."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from dlimages.model.selection import Selection


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
