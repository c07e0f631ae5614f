"""Enough of GitHub Actions' expression language to evaluate the workflows' `if:` conditions on an event: string
literals, true/false/null, context paths, ! == != && || and parentheses, format() and the status functions. As on
GitHub: && and || give an operand, strings compare without case, a missing property is null, and an `if:` without
a status function means `success() && (...)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(r"\s*('(?:[^']|'')*'|&&|\|\||==|!=|[!(),]|[A-Za-z_][\w.-]*)")
STATUS = ("always", "cancelled", "success", "failure")
LITERALS = {"true": True, "false": False, "null": None}


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "")


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    return bool(left == right)


class _Expression:
    def __init__(self, text: str, context: Mapping[str, Any], status: str) -> None:
        self.tokens: list[str] = []
        position = 0
        while text[position:].strip():
            match = _TOKEN.match(text, position)
            assert match, f"cannot read {text[position:]!r}"
            self.tokens.append(match.group(1))
            position = match.end()
        self.context, self.status = context, status

    def take(self, expected: str | None = None) -> str:
        word = self.tokens.pop(0)
        assert expected in (None, word), f"expected {expected}, got {word}"
        return word

    def either(self) -> Any:
        value = self.both()
        while self.tokens[:1] == ["||"]:
            self.take()
            right = self.both()
            value = value if truthy(value) else right
        return value

    def both(self) -> Any:
        value = self.compare()
        while self.tokens[:1] == ["&&"]:
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        while self.tokens[:1] in (["=="], ["!="]):
            equal = self.take() == "=="
            value = _equal(value, self.unary()) == equal
        return value

    def unary(self) -> Any:
        if self.tokens[:1] == ["!"]:
            self.take()
            return not truthy(self.unary())
        word = self.take()
        if word == "(":
            value = self.either()
            self.take(")")
            return value
        if word.startswith("'"):
            return word[1:-1].replace("''", "'")
        if word in LITERALS:
            return LITERALS[word]
        if self.tokens[:1] == ["("]:
            self.take()
            args = []
            while self.tokens[0] != ")":
                args.append(self.either())
                if self.tokens[0] == ",":
                    self.take()
            self.take(")")
            if word in STATUS:
                return word == "always" or self.status == word
            assert word == "format", word
            return re.sub(r"\{(\d+)\}", lambda m: str(args[1 + int(m.group(1))] or ""), args[0])
        value: Any = self.context
        for part in word.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value


def runs(condition: str | None, context: Mapping[str, Any], *, status: str = "success") -> bool:
    """Whether a job or step with this `if:` (None: none) runs on the event `context` describes, the jobs and steps
    before it having ended with `status`."""
    text = (condition or "success()").strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    if not re.search(rf"\b({'|'.join(STATUS)})\(", text):
        text = f"success() && ({text})"
    expression = _Expression(text, context, status)
    value = expression.either()
    assert not expression.tokens, f"left over: {expression.tokens}"
    return truthy(value)
