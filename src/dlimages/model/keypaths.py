"""pydantic's validation errors said for the person who wrote matrix.yaml: each one's key path, what is wrong there
and what is allowed."""

from __future__ import annotations

import re
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from dlimages.core.errors import Problem, allowed_list


def _key_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", item):
            parts.append(f".{item}" if parts else item)
        else:
            parts.append(f'."{item}"' if parts else f'"{item}"')
    return "".join(parts) or "(top level)"


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional so that a field's model class can be found."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            options = [a for a in get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def _fields_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Names of the keys allowed where an unknown key was found, by walking the model from `root` along its path."""
    node: Any = root
    for item in loc[:-1]:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(item))
            if field is None:
                return []
            node = field.annotation
        elif get_origin(node) in (dict, list):
            node = get_args(node)[-1]
        else:
            return []
    node = _unwrap(node)
    return list(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def problem_from_pydantic(error: Any, where_file: str, root: type[BaseModel]) -> Problem:
    """One problem of `root.model_validate` as a Problem at `where_file: key.path`."""
    loc = tuple(error["loc"])
    in_key = loc[-1:] == ("[key]",)  # pydantic's marker for a problem with a mapping's key
    path = f"{where_file}: {_key_path(loc[:-1] if in_key else loc)}"
    kind = error["type"]
    if in_key:
        return Problem(path, f"the key {error['input']!r} is not well formed: {error['msg']}")
    if kind == "extra_forbidden":
        return Problem(path, "unknown key", allowed_list(_fields_at(root, loc)) or "no further keys")
    if kind == "missing":
        return Problem(path, "required key is missing")
    if kind == "string_pattern_mismatch":
        pattern = error["ctx"]["pattern"]
        return Problem(path, f"{error['input']!r} is not well formed", f"text matching {pattern}")
    if kind == "literal_error":
        return Problem(path, f"{error['input']!r} is not allowed", str(error["ctx"]["expected"]))
    if kind == "string_type" and isinstance(error["input"], (int, float)):  # a bool is an int too
        what = "boolean" if isinstance(error["input"], bool) else "number"
        return Problem(path, f"expected text, got the {what} {error['input']!r}", "quote it")
    if kind == "value_error":
        return Problem(path, str(error["msg"]).removeprefix("Value error, "))
    return Problem(path, f"{error['msg']} (got {error['input']!r})")
