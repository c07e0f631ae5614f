"""Problems found in user input (matrix.yaml or command-line flags), reported together, never as tracebacks."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# USER:PASSWORD@ in a URL or a host given as a flag's value: the password never reaches a message.
# Not REPOSITORY:TAG@sha256:... (an image pinned by digest).
_CREDENTIALS = re.compile(r"(?:(?<=://)|(?<![\w./:-]))([\w.%~+-]+):([^\s@/'\"]+)@(?!sha256:)(?=[\w\[])")


def redact(text: str) -> str:
    """`text` with the password of every USER:PASSWORD@ in it replaced by ***."""
    return _CREDENTIALS.sub(r"\1:***@", text)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: where it is, what is wrong, and what is allowed instead."""

    where: str
    message: str
    allowed: str = ""

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}"
        return redact(f"{text} (allowed: {self.allowed})" if self.allowed else text)


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
