"""Problems found in user input (matrix.yaml or command-line flags), reported together, never as tracebacks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: where it is, what is wrong, and what is allowed instead."""

    where: str
    message: str
    allowed: str = ""

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}"
        return f"{text} (allowed: {self.allowed})" if self.allowed else text


class InputError(Exception):
    """Raised with every problem found, so the user fixes them all in one go."""

    def __init__(self, problems: Iterable[Problem], *, heading: str = "") -> None:
        self.problems = tuple(problems)
        self.heading = heading
        super().__init__(self.report())

    def report(self) -> str:
        lines = [self.heading] if self.heading else []
        lines += [f"error: {problem}" for problem in self.problems]
        return "\n".join(lines)


def allowed_list(values: Iterable[object]) -> str:
    return ", ".join(str(value) for value in values)
