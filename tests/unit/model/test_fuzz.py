"""Fuzzing matrix.yaml and the flags of select/build --dry-run/doctor with Hypothesis (issue 8).

Each example mutates the fixture matrix (as data: a value swapped for another fact of the fixture or for junk, a
key deleted, inserted or renamed; or as text: tokens, lines and numbers changed, an alias bomb, bytes that are not
UTF-8), or makes short YAML from the pieces that reach PyYAML's corners, or draws command-line flags; then runs what
the tasks run, in this process: load and validate, expand, render into a repo copy, select, plan the builds, judge a
GPU node, print the tables. The package must either return or raise InputError (never any other exception), a
render that fails must leave images/ exactly as it was, flags it accepts must be plain ASCII, and every example must
finish within the deadline. The run ends by saying how many cases it tried.

Profiles (DLIMAGES_FUZZ=name): `ci`, the default, is derandomized with no example database, so every run, in CI
or here, tries the same cases and a failure reproduces with the same command; `deep` is random and ten times
longer, for a hunt by hand (`DLIMAGES_FUZZ=deep python3 -m pytest tests/unit/model/test_fuzz.py`).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlimages.building.plan import Secrets, plan_builds
from dlimages.core.errors import InputError
from dlimages.generate.project import Project
from dlimages.model import doctor, doctor_text, gpunode
from dlimages.model.cells import Expansion, expand
from dlimages.model.matrixyaml import VersionsAsText
from dlimages.model.selection import Selection, select
from dlimages.model.spec import Matrix, load_matrix, parse_matrix
from dlimages.model.tables import cells_table, exclusions_text

REPO = Path(__file__).resolve().parents[3]
FIXTURE_MATRIX = REPO / "tests/fixtures/matrix.yaml"
MATRIX_TEXT = FIXTURE_MATRIX.read_text(encoding="utf-8")
PRISTINE: dict[str, Any] = yaml.load(MATRIX_TEXT, Loader=VersionsAsText)  # noqa: S506 - a SafeLoader subclass

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=5),  # a typical example takes 20-80 ms; the billion laughs took minutes
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("deep", settings.get_profile("ci"), derandomize=False)
PROFILE = os.environ.get("DLIMAGES_FUZZ", "ci")
SCALE = 10 if PROFILE == "deep" else 1
FUZZ = settings.get_profile(PROFILE)

RAN: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _count_examples(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print how many cases the fuzz tests ran, past output capture: CI logs show it on every run."""
    start = time.monotonic()
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    counts = ", ".join(f"{name} {count}" for name, count in sorted(RAN.items()))
    line = f"fuzz ({PROFILE}): {sum(RAN.values())} cases ({counts}) in {time.monotonic() - start:.1f} s"
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\n" + line)


def _ran(name: str) -> None:
    RAN[name] = RAN.get(name, 0) + 1


# --- What the tasks do with a matrix --------------------------------------------------------------------------

NODE = gpunode.Node(driver="535.104.05", gpus=(gpunode.Gpu("GPU 0", "sm_90"),), container_runtime=None, source="given")


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    found: dict[str, tuple[int, bytes]] = {}
    for path in sorted(folder.rglob("*")) if folder.exists() else []:
        mode = path.lstat().st_mode
        found[str(path.relative_to(folder))] = (mode, path.read_bytes() if stat.S_ISREG(mode) else b"")
    return found


class Repo:
    """A repo copy to render into: matrix.yaml replaced per example, the real templates, images/ kept between."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "templates").symlink_to(REPO / "templates", target_is_directory=True)
        (root / "matrix.yaml").write_text(MATRIX_TEXT, encoding="utf-8")
        Project(root).write_rendered()

    def run_tasks(self, text: str | bytes) -> None:
        """Everything the tasks do with this matrix.yaml; returns, or raises InputError with images/ unchanged."""
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        (self.root / "matrix.yaml").write_bytes(data)
        project = Project(self.root)
        before = _snapshot(self.root / "images")
        try:
            project.write_rendered()  # load, validate, expand, render, write (all or nothing)
        except InputError:
            assert _snapshot(self.root / "images") == before, "a failed render changed images/"
            raise
        run_the_rest(project.matrix, project.expansion, self.root)


def run_the_rest(matrix: Matrix, expansion: Expansion, root: Path) -> None:
    json.dumps([cell.as_json() for cell in expansion.cells])
    cells_table(expansion.cells, {})
    exclusions_text(expansion.excluded)
    doctor_text.format_report(doctor.report(expansion.cells, NODE), NODE)
    try:
        cells = select(matrix, expansion, Selection())
    except InputError:
        return
    for profile in matrix.mirrors:
        for plan in plan_builds(matrix, cells[:2], profile, Secrets(), root / ".work"):
            plan.describe()


@pytest.fixture(scope="module")
def repo() -> Iterator[Repo]:
    # Not tmp_path: Hypothesis runs many examples per test call, and one repo serves them all.
    folder = Path(tempfile.mkdtemp(prefix="dlimages-fuzz-"))
    try:
        yield Repo(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _returns_or_input_error(repo: Repo, text: str | bytes, name: str) -> None:
    try:
        repo.run_tasks(text)
    except InputError as error:
        assert error.problems, "an InputError without a problem"
        assert all(str(problem) for problem in error.problems)
        _ran(f"{name}: refused")
    else:
        _ran(f"{name}: valid, rendered and planned")


# --- Junk ------------------------------------------------------------------------------------------------------

NASTY = [
    "",
    " ",
    "-",
    "--help",
    "-rf",
    "~",
    "null",
    "yes",
    "on",
    "0x1F",
    "1e400",
    ".nan",
    "3.10",
    "3.1",
    "011",
    "99999999999999999999999",
    "9" * 4400,  # past int()'s 4,300 digits
    "3." + "9" * 4400,
    "\u0663.\u0661\u0660",
    "\uff13.\uff11\uff10",
    "\u00b2",
    "sm_90",
    "sm_",
    "compute_90",
    "runtime",
    "none",
    "host",
    "latest",
    "v1.0",
    "2.1.2+cu118",
    "http://x/;id",
    "http://x/$(id)",
    "https://u:p@x.example/simple",
    "http://x.example/{variant}/{0}",
    "http://x.example/{variant.__class__}",
    "http://x.example/{}",
    "http://x.example/{variant!r}",
    "ubuntu:22.04\nRUN id",
    "ubuntu:22.04 AS x",
    "nvidia/cuda\nUSER root",
    "${IFS}",
    "`id`",
    "'\"",
    "../../etc",
    "{{ 7 * 7 }}",
    "{% for x in y %}",
    "\x1b[2J",
    "\ue000",
    "\U0001f600",
    "a\u0301",
    "\u202e",
    "\r\n",
    "\t",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**19, max_value=10**60),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(NASTY),
    st.from_regex(r"[0-9]{1,25}(\.[0-9]{1,25}){0,3}", fullmatch=True),
)
KEYS = st.one_of(st.text(max_size=12), st.sampled_from(NASTY[:40]), st.integers(), st.none(), st.booleans())
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=8,
)


def _parts(value: Any) -> Iterator[Any]:
    yield value
    children = list(value.items()) if isinstance(value, dict) else value if isinstance(value, list) else []
    for child in children:
        yield from _parts(child) if not isinstance(child, tuple) else (part for c in child for part in _parts(c))


# The fixture's own facts (every version, name and URL) and sections: moved about, they stay within the grammars
# and reach expansion, rendering and planning, where junk is mostly refused by validation.
FACTS = sorted({part for part in _parts(PRISTINE) if isinstance(part, str)})
SECTIONS = [part for part in _parts(PRISTINE) if isinstance(part, (dict, list)) and part]
FACT = st.sampled_from(FACTS)
VALUES = st.one_of(FACT, st.sampled_from(SECTIONS).map(copy.deepcopy), JUNK)
NEW_KEYS = st.one_of(st.sampled_from(FACTS), KEYS)


def _mutate(data: Any, draw: st.DrawFn) -> Any:
    """One change somewhere in `data`: most often one value swapped for another of the fixture's facts (which keeps
    the grammars and moves the semantics), else a value replaced by junk or a section, a key deleted, inserted or
    renamed, at a random depth."""
    swap = draw(st.integers(0, 3)) > 0
    parent: Any = None
    key: Any = None
    node = data
    while isinstance(node, (dict, list)) and node and (swap or draw(st.integers(0, 3)) > 0):
        parent = node
        key = draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
        node = node[key]
    if swap and parent is not None:
        parent[key] = draw(FACT)
        return data
    operation = draw(st.sampled_from(["replace", "delete", "insert", "rename"]))
    if parent is None or operation == "insert":
        target = node if isinstance(node, (dict, list)) else parent
        if isinstance(target, dict):
            target[draw(NEW_KEYS)] = draw(VALUES)
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(VALUES))
        elif parent is None:
            return draw(VALUES)
    elif operation == "replace":
        parent[key] = draw(VALUES)
    elif operation == "delete":
        del parent[key]
    elif isinstance(parent, dict):
        parent[draw(NEW_KEYS)] = parent.pop(key)
    return data


@st.composite
def mutated_data(draw: st.DrawFn) -> str:
    data: Any = copy.deepcopy(PRISTINE)  # shared lists stay shared: the dump writes them as anchors and aliases
    for _ in range(draw(st.integers(1, 4))):
        data = _mutate(data, draw)
    try:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))
    except (ValueError, yaml.YAMLError):  # keys PyYAML cannot write (NaN, unhashable): the text fuzz covers YAML
        return MATRIX_TEXT


LAUGHS = "x-laughs: [&b0 [a, a, a, a, a, a, a, a, a, a]" + "".join(
    f", &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, 9)
)
TOKENS = [
    ":",
    ": ",
    "-",
    "- ",
    "? ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "&a [1]",
    "<<: *a",
    "<<: ",
    "!!int ",
    "!!map ",
    "! ",
    "%YAML 1.1\n",
    "---\n",
    "...\n",
    "|",
    ">",
    "#",
    "'",
    '"',
    "\\",
    '"\\U00110000"',
    '"\\e"',
    '"\\ud800"',
    "\t",
    "\n",
    "  ",
    "\r",
    "\x00",
    "\x85",
    "\ufeff",
    "@",
    "`",
    "%",
    "9" * 30,
    "9" * 4400,
    "2001-13-99",
    LAUGHS + "]\n",
    "x: " + "[" * 200,
    "~",
    "null",
    "0o17",
    "1_000",
]


@st.composite
def mutated_text(draw: st.DrawFn) -> str | bytes:
    text = MATRIX_TEXT
    for _ in range(draw(st.integers(1, 3))):
        lines = text.splitlines(keepends=True)
        line = draw(st.integers(0, len(lines) - 1))
        operation = draw(st.sampled_from(["insert", "replace", "delete-line", "copy-line", "indent", "number"]))
        token = draw(st.sampled_from(TOKENS) | st.text(max_size=6))
        if operation in ("insert", "replace"):
            at = draw(st.integers(0, len(text)))
            end = at + (draw(st.integers(0, 8)) if operation == "replace" else 0)
            text = text[:at] + token + text[end:]
        elif operation == "delete-line":
            text = "".join(lines[:line] + lines[line + 1 :])
        elif operation == "copy-line":
            text = "".join([*lines[: line + 1], lines[line], *lines[line + 1 :]])
        elif operation == "indent":
            text = "".join([*lines[:line], " " * draw(st.integers(1, 5)) + lines[line], *lines[line + 1 :]])
        else:
            number = draw(st.sampled_from(["99999999999999999999999", "9" * 4400, "0", "-1", "\u0661\u0662"]))
            text = "".join([*lines[:line], _replace_a_number(lines[line], number), *lines[line + 1 :]])
    if draw(st.integers(0, 9)) == 0:  # now and then, bytes that are not UTF-8
        return text.encode("utf-8", "surrogatepass").replace(b"e", b"\xe9", draw(st.integers(1, 3)))
    return text


def _replace_a_number(line: str, number: str) -> str:
    digits = [i for i, ch in enumerate(line) if ch.isdigit()]
    return line[: digits[0]] + number + line[digits[0] + 1 :] if digits else line


# --- The fuzz tests ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@settings(FUZZ, max_examples=40 * SCALE)
@given(text=mutated_data())
def test_matrix_data_mutations_return_or_raise_input_error(repo: Repo, text: str) -> None:
    _returns_or_input_error(repo, text, "matrix data")


@pytest.mark.slow
@settings(FUZZ, max_examples=40 * SCALE)
@given(text=mutated_text())
def test_matrix_text_mutations_return_or_raise_input_error(repo: Repo, text: str | bytes) -> None:
    _returns_or_input_error(repo, text, "matrix text")


# Short YAML made of the pieces that reach PyYAML's corners: tags, escapes, directives, anchors, merges, dates.
YAML_PIECES = [
    *":-?[]{},&*!|>'\"%@`#\n\t \\<=~.0123456789aZ_",
    *[
        "&a ",
        "*a",
        "<<: ",
        "!!int ",
        "!!str ",
        "!!map ",
        "!!set ",
        "!!binary ",
        "!!omap ",
        "!!timestamp ",
        "---",
        "...",
    ],
    *["%YAML 1.1", "%TAG ! tag:x,2000:", "!<tag:yaml.org,2002:int>", "!e!x ", "\\x", "\\u", "\\U0011", "\\e", "\\N"],
    *["\r", "\x85", "\u2028", "\ufeff", "? ", ": ", "- ", "  ", "null", "yes", "0x", "0o", "0b", "1_0", "9" * 30],
    *["1e9", ".inf", "2001-01-01", "2001-13-40 25:99:99", "schema_version: ", "release: "],
]


@pytest.mark.slow
@settings(FUZZ, max_examples=400 * SCALE)
@given(pieces=st.lists(st.sampled_from(YAML_PIECES), min_size=1, max_size=25))
def test_yaml_soup_is_valid_or_an_input_error(pieces: list[str]) -> None:
    # Before issue 8 this found nine crash sites in PyYAML's constructors and scanner (ValueError, IndexError).
    _ran("yaml soup")
    try:
        parse_matrix("".join(pieces))
    except InputError as error:
        assert error.problems


@pytest.fixture(scope="module")
def fixture_project() -> tuple[Matrix, Expansion]:
    matrix = load_matrix(FIXTURE_MATRIX)
    return matrix, expand(matrix)


FLAG = st.none() | st.sampled_from(NASTY) | st.text(max_size=12)
# Versions as a user might mistype them; Python's \d matches every script's digits (item 9 of the issue).
VERSION_FLAG = st.one_of(
    FLAG,
    st.sampled_from(["2.1", "2.1.2", "2.14", "1.7", "11.8", "12.1", "3.10", "3.11"]),
    st.from_regex(r"\d{1,5}(\.\d{1,5}){0,3}", fullmatch=True),
    st.sampled_from(["", ".", "2.", ".1", "2..1", "-1", "+1", "\u00b2", "2.\u00b9", "0", "00", " 2.1", "2.1\n"]),
    st.sampled_from(["99999999999999999999999", "9" * 4400, "2." + "9" * 4400]),
)


@pytest.mark.slow
@settings(FUZZ, max_examples=150 * SCALE)
@given(
    cuda=VERSION_FLAG,
    torch=VERSION_FLAG,
    tf=VERSION_FLAG,
    python=VERSION_FLAG,
    flavor=FLAG | st.sampled_from(["runtime", "devel"]),
    mirror=st.sampled_from(["none", "campus", "cloud", *NASTY]) | st.text(max_size=12),
    gpu=VERSION_FLAG | st.sampled_from(["sm_90", "9.0", "90", "sm_80,sm_86", "sm_\u0669\u0660"]),
    driver=VERSION_FLAG
    | st.sampled_from(["535.104.05", "450.80.02"])
    | st.from_regex(r"\d{3}\.\d{2,3}", fullmatch=True),
)
def test_flags_return_or_raise_input_error(
    fixture_project: tuple[Matrix, Expansion],
    cuda: str | None,
    torch: str | None,
    tf: str | None,
    python: str | None,
    flavor: str | None,
    mirror: str,
    gpu: str | None,
    driver: str | None,
) -> None:
    _ran("flags")
    matrix, expansion = fixture_project
    try:  # invoke build --dry-run
        cells = select(matrix, expansion, Selection.from_flags(cuda, torch, tf, python, flavor))
        for plan in plan_builds(matrix, cells[:3], mirror, Secrets(), Path(tempfile.gettempdir()) / "dlimages"):
            plan.describe()
    except InputError as error:
        assert error.problems
    else:  # what was accepted is plain ASCII: no other script's digits in a tag or a pin
        assert all(_plain(value) for value in (cuda, torch, tf, python, flavor, mirror)), "accepted non-ASCII"
    try:  # invoke doctor --gpu --driver
        node = gpunode.node_from_flags(gpu, driver, lambda: NODE)
        doctor_text.format_report(doctor.report(expansion.cells, node), node)
    except InputError as error:
        assert error.problems
    else:
        assert _plain(node.driver) and all(_plain(g.arch) for g in node.gpus), f"accepted {node}"


def _plain(value: str | None) -> bool:
    return value is None or (value.isascii() and value.isprintable())
