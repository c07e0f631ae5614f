"""matrix.yaml's text read as YAML, safely: versions stay text, duplicate keys and explicit tags are refused, what
aliases expand to is bounded, and every YAML problem is reported with its line."""

from __future__ import annotations

from typing import Any

import yaml

from dlimages.core.errors import InputError, Problem

# Bounds on what matrix.yaml can make this process do. The real matrix is about 15 KB, about 1,000 values once its
# aliases are expanded and 10 levels deep: each limit leaves it fifty times the room, and keeps the worst case
# (parse, validate, report every problem) to seconds and megabytes.
MAX_MATRIX_BYTES = 1024 * 1024
# Aliases (*name) and merges (<<: *name) share one parsed node, but validation and error reports walk every use
# of it: a few lines of nested aliases (a "billion laughs") would otherwise cost gigabytes and minutes. So values
# (mappings, lists, scalars), characters and depth are counted as if every alias were written out in full.
MAX_NODES = 50_000
MAX_TEXT = MAX_MATRIX_BYTES
MAX_DEPTH = 32
# One value's length. It also keeps every digit string below Python's int() limit (4,300 digits), so no number,
# however long, can crash a version comparison.
MAX_VALUE = 4096


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that matrix.yaml does not accept: over a limit, an explicit tag, a character from an escape."""


def _refuse(problem: str, mark: Any) -> _Refused:
    return _Refused(None, None, problem, mark)


class VersionsAsText(yaml.SafeLoader):
    """YAML loader that keeps numbers and dates as text, refuses duplicate keys and explicit tags, and bounds
    what aliases expand to.

    Versions are never numbers: unquoted `3.10` would otherwise read as 3.1 and `11.0` as 11.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        # Values and characters so far, and the nesting depth here, all with aliases expanded; counted as the
        # document is composed, so that a limit stops the parse as soon as it is passed.
        self._values = 0
        self._characters = 0
        self._depth = 0
        # (values, characters, depth) of each finished node, by id(node), for the aliases that name it. A node
        # enters it when it is complete: an alias to a node not yet there names one of its own parents (a cycle).
        self._expanded: dict[int, tuple[int, int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._expanded.get(id(node))
            if size is None:
                raise _refuse(f"the alias *{event.anchor} is used inside the value it names", event.start_mark)
            self._count(*size, event.start_mark)
            return node
        tag = getattr(event, "tag", None)
        if tag is not None:
            # !!int, !!float, !!bool, !!timestamp and !!map run constructors that raise on bad input; matrix.yaml
            # needs no tag (versions are text, the schema gives every value its type).
            shown = tag.replace("tag:yaml.org,2002:", "!!", 1)
            raise _refuse(
                f"explicit YAML tags are not allowed (found {shown}); write the value plainly", event.start_mark
            )
        if not isinstance(event, yaml.ScalarEvent):  # a mapping or a list: counted before what it holds
            self._count(1, 0, 1, event.start_mark)
        values, characters = self._values, self._characters
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        if isinstance(node, yaml.ScalarNode):
            self._check_scalar(node)
            self._count(1, len(node.value), 1, node.start_mark)
            self._expanded[id(node)] = (1, len(node.value), 1)
        elif node is not None:
            depth = 1 + max((self._expanded[id(child)][2] for child in _children(node)), default=0)
            self._expanded[id(node)] = (self._values - values + 1, self._characters - characters, depth)
        return node

    def _count(self, values: int, characters: int, depth: int, mark: Any) -> None:
        self._values += values
        self._characters += characters
        if self._values > MAX_NODES:
            raise _refuse(f"too many aliases/nodes (limit {MAX_NODES} values, aliases expanded)", mark)
        if self._characters > MAX_TEXT:
            raise _refuse(f"too much text once aliases are expanded (limit {MAX_TEXT} characters)", mark)
        if self._depth + depth > MAX_DEPTH:
            raise _refuse(f"nested too deeply (limit {MAX_DEPTH} levels, aliases expanded)", mark)

    @staticmethod
    def _check_scalar(node: yaml.ScalarNode) -> None:
        value: str = node.value
        if len(value) > MAX_VALUE:
            raise _refuse(f"a value longer than {MAX_VALUE} characters", node.start_mark)
        # An escape ("\e", "\ud800") can make characters that the file itself may not hold; they would reach
        # terminals and generated files.
        bad = yaml.reader.Reader.NON_PRINTABLE.search(value)
        if bad:
            raise _refuse(
                f"a value holds U+{ord(bad.group()):04X}, a character YAML files may not contain", node.start_mark
            )

    def scan_flow_scalar_non_spaces(self, double: bool, start_mark: Any) -> list[str]:
        # PyYAML turns "\U00110000" into chr(0x110000), which raises ValueError (or OverflowError) instead of a
        # YAMLError.
        try:
            chunks: list[str] = super().scan_flow_scalar_non_spaces(double, start_mark)
        except (ValueError, OverflowError):
            raise yaml.scanner.ScannerError(
                "while scanning a quoted scalar", start_mark, "an escape names no Unicode character", self.get_mark()
            ) from None
        return chunks


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value)


# A copy of the resolver table: editing the inherited one would change every PyYAML loader in the process.
VersionsAsText.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: VersionsAsText, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    # Duplicates are looked for among the mapping's own keys: a key that overrides one merged in by `<<: *anchor`
    # is what merging is for. PyYAML puts merged keys first, so the mapping's own keys win.
    own = [key_node for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge"]
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node in own:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be plain text, not a list or mapping", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


VersionsAsText.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, where_file: str) -> Any:
    """The one document in `text`, read by VersionsAsText; InputError at `where_file:LINE` for any YAML problem."""
    loader = None
    try:
        loader = VersionsAsText(text)  # checks every character first
        return loader.get_single_data()
    except _Refused as exc:
        where = f"{where_file}:{exc.problem_mark.line + 1}" if exc.problem_mark else where_file
        raise InputError([Problem(where, str(exc.problem))]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise InputError(
            [Problem(f"{where_file}:{line}", f"not valid YAML: the character U+{exc.character:04X} is not allowed")]
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{where_file}:{mark.line + 1}" if mark else where_file
        problem = getattr(exc, "problem", None) or str(exc)
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if problem == "second occurrence" and context and context_mark:  # PyYAML's duplicate anchor
            problem = f"{context} at line {context_mark.line + 1}"
        raise InputError([Problem(where, f"not valid YAML: {problem}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
