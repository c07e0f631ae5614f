"""Loading matrix.yaml safely: bounded size, bounded alias expansion, no explicit tags, UTF-8 only, and every
malformed file an InputError naming the file and line, never a traceback, a hang or gigabytes of memory.

Schema messages are tested in test_spec.py; this file is about the loader (spec.load_matrix, spec.parse_matrix).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dlimages.core.errors import InputError
from dlimages.model.matrixyaml import MAX_DEPTH, MAX_MATRIX_BYTES, MAX_NODES, MAX_TEXT, MAX_VALUE
from dlimages.model.spec import load_matrix, parse_matrix

FIXTURE_MATRIX = Path(__file__).resolve().parents[2] / "fixtures/matrix.yaml"
MATRIX_TEXT = FIXTURE_MATRIX.read_text(encoding="utf-8")
ARCHS = "gpu_archs: [sm_35, sm_37, sm_50, sm_60, sm_70, sm_75, sm_80, sm_86, sm_89, sm_90]"


def _edit(old: str, new: str, text: str = MATRIX_TEXT) -> str:
    assert text.count(old) == 1, f"expected {old!r} once in the fixture matrix"
    return text.replace(old, new)


def _report(text: str) -> str:
    with pytest.raises(InputError) as caught:
        parse_matrix(text)
    return caught.value.report()


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def _laughs(levels: int) -> str:
    """List items, each an anchor listing ten aliases of the one before: 10 ** levels values once expanded."""
    items = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    items += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return ", ".join(items)


# --- Alias expansion ----------------------------------------------------------------------------------------


def test_billion_laughs_in_a_list_field_is_refused_at_once() -> None:
    # 10**9 values once expanded, inside a list field: validating and reporting them ran past 1.2 GB and 5 minutes.
    text = _edit(ARCHS, f"gpu_archs: [{_laughs(9)}]")
    start = time.monotonic()
    report = _report(text)
    assert time.monotonic() - start < 2
    line = _line_of(text, "gpu_archs: [&l0")
    assert report == f"error: matrix.yaml:{line}: too many aliases/nodes (limit {MAX_NODES} values, aliases expanded)"


def test_aliases_expanding_past_the_limit_are_refused_even_when_every_value_is_small() -> None:
    # 111,111 values, under a key that does not exist: the old loader reported the whole expanded value.
    text = "x-laughs: [" + _laughs(5) + "]\n" + MATRIX_TEXT
    assert _report(text) == (
        f"error: matrix.yaml:1: too many aliases/nodes (limit {MAX_NODES} values, aliases expanded)"
    )


def test_text_multiplied_by_aliases_is_bounded() -> None:
    # 200 x 200 uses of a 4,000-character value: 160 million characters, from a 5 KB file.
    big = "x" * 4000
    text = f"a: &a {big}\nb: &b [{'*a, ' * 200}]\nc: [{'*b, ' * 200}]\n"
    assert _report(text) == (
        f"error: matrix.yaml:3: too much text once aliases are expanded (limit {MAX_TEXT} characters)"
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: &x [1, *x]\n", 1),
        ("a: &x {b: {c: *x}}\n", 1),
        ("a: &x\n  <<: *x\n", 2),  # a merge of a mapping into itself: the old loader recursed until it crashed
    ],
    ids=["list", "mapping", "merge"],
)
def test_an_alias_inside_its_own_value_is_refused(text: str, line: int) -> None:
    assert _report(text) == f"error: matrix.yaml:{line}: the alias *x is used inside the value it names"


def test_a_long_chain_of_merges_is_refused_not_a_recursion_error() -> None:
    text = "a0: &a0 {k0: v}\n" + "".join(f"a{i}: &a{i} {{<<: *a{i - 1}, k{i}: v}}\n" for i in range(1, 2000))
    assert _report(text) == (
        f"error: matrix.yaml:{MAX_DEPTH - 1}: nested too deeply (limit {MAX_DEPTH} levels, aliases expanded)"
    )


@pytest.mark.parametrize(
    "text",
    ["x: " + "[" * 5000 + "1\n", "x: " + "{a: " * 5000 + "1\n", "x:\n" + "- " * 5000 + "1\n"],
    ids=["flow-list", "flow-mapping", "block-list"],
)
def test_deep_nesting_is_refused_not_a_recursion_error(text: str) -> None:
    report = _report(text)
    assert f"nested too deeply (limit {MAX_DEPTH} levels, aliases expanded)" in report


def test_legitimate_anchors_and_merges_still_work() -> None:
    # The real matrix.yaml shares arch lists with anchors; merges (<<:) must keep working too.
    text = _edit(
        'default: {cuda: "11.8", version: "2.1", python: "3.10", flavor: runtime}',
        'default: &default {cuda: "11.8", version: "2.1", python: "3.10", flavor: runtime}',
    )
    text = _edit(
        'default: {cuda: "11.8", version: "2.14", python: "3.10", flavor: runtime}',
        'default: {<<: *default, version: "2.14"}',
        text,
    )
    assert parse_matrix(text) == parse_matrix(MATRIX_TEXT)


def test_a_matrix_near_the_limits_loads() -> None:
    # 11,111 values through aliases, valid ones, in a list field: the limits leave a matrix room to grow.
    archs = ["&a0 [sm_80, sm_80, sm_80, sm_80, sm_80, sm_80, sm_80, sm_80, sm_80, sm_80]"]
    archs += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 4)]
    text = _edit(ARCHS, "gpu_archs: [sm_80]")
    text = _edit("arch_lists:", f"x-shared: [{', '.join(archs)}]\narch_lists:", text)
    report = _report(text)  # x-shared is an unknown key, and the only problem
    assert report == (
        "error: matrix.yaml: x-shared: unknown key (allowed: schema_version, release, publisher, images, axes, "
        "flavors, cuda, os, nvidia_cuda, arch_lists, frameworks, partials, packages, mirrors)"
    )


# --- Size, encoding, file kind ------------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    # Valid YAML and a valid matrix, padded with a comment: only its size is wrong.
    path.write_text("#" + "x" * MAX_MATRIX_BYTES + "\n" + MATRIX_TEXT, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert caught.value.report() == f"error: matrix.yaml: too large: over the limit of {MAX_MATRIX_BYTES} bytes (1 MiB)"


def test_text_over_the_size_limit_is_refused() -> None:
    text = "#" + "x" * MAX_MATRIX_BYTES + "\n" + MATRIX_TEXT
    assert (
        _report(text)
        == f"error: matrix.yaml: too large: {len(text)} characters, over the limit of {MAX_MATRIX_BYTES} (1 MiB)"
    )


@pytest.mark.parametrize(
    ("data", "line", "byte"),
    [
        (MATRIX_TEXT.replace("release: v0.9", "release: v0.9\xe9", 1).encode("latin-1"), None, 0xE9),
        (b"\xff\xfe" + "schema_version: 1\n".encode("utf-16-le"), 1, 0xFF),
        (b"schema_version: 1\nrelease: \xc3\x28\n", 2, 0xC3),
    ],
    ids=["latin-1", "utf-16", "broken-sequence"],
)
def test_a_file_that_is_not_utf8_is_an_input_error(tmp_path: Path, data: bytes, line: int | None, byte: int) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(data)
    line = line or _line_of(MATRIX_TEXT, "release: v0.9")
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert caught.value.report() == f"error: matrix.yaml:{line}: not UTF-8 (byte 0x{byte:02x}); save the file as UTF-8"


def test_a_utf8_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + MATRIX_TEXT.encode("utf-8"))
    assert load_matrix(path) == load_matrix(FIXTURE_MATRIX)


def test_a_directory_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.mkdir()
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert caught.value.report() == f"error: {path}: cannot read: Is a directory"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    # Opening a FIFO for reading blocks until a writer comes: it is never opened.
    path = tmp_path / "matrix.yaml"
    os.mkfifo(path)
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert caught.value.report() == f"error: {path}: cannot read: not a regular file"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_link_to_an_endless_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.symlink_to("/dev/zero")
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert caught.value.report() == f"error: {path}: cannot read: not a regular file"


# --- Values the YAML library would crash on or let through --------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        ("schema_version: 1", "schema_version: !!int " + "9" * 5000, "!!int"),  # int(): over 4,300 digits
        ("schema_version: 1", "schema_version: !!int 0x", "!!int"),
        ("release: v0.9", "release: !!float abc", "!!float"),
        ("release: v0.9", "release: !!bool maybe", "!!bool"),
        ("release: v0.9", "release: !!timestamp 2001-02-30", "!!timestamp"),
        ("release: v0.9", "release: !!map [1]", "!!map"),
        ("release: v0.9", "release: !!python/object:os.system x", "!!python/object:os.system"),
        ("release: v0.9", "release: !custom x", "!custom"),
    ],
    ids=["huge-int", "bad-int", "bad-float", "bad-bool", "bad-date", "map-of-list", "python", "local"],
)
def test_explicit_tags_are_refused(old: str, new: str, shown: str) -> None:
    text = _edit(old, new)
    assert _report(text) == (
        f"error: matrix.yaml:{_line_of(text, new)}: explicit YAML tags are not allowed (found {shown}); "
        "write the value plainly"
    )


def test_dates_are_read_as_text_like_versions() -> None:
    # An unquoted date used to become a datetime.date (and an impossible one a ValueError traceback).
    text = _edit("release: v0.9", "release: 2001-02-30")
    assert _report(text).startswith("error: matrix.yaml: release: '2001-02-30' is not well formed")


@pytest.mark.parametrize("escape", ["\\U00110000", "\\UFFFFFFFF"], ids=["past-unicode", "past-c-int"])
def test_an_escape_that_names_no_character_is_invalid_yaml(escape: str) -> None:
    text = _edit("release: v0.9", f'release: "v0.9{escape}"')
    line = _line_of(text, "release: ")
    assert _report(text) == f"error: matrix.yaml:{line}: not valid YAML: an escape names no Unicode character"


@pytest.mark.parametrize(
    ("escape", "code"),
    [("\\e[2J", "001B"), ("\\ud800", "D800"), ("\\x07", "0007")],
    ids=["terminal", "surrogate", "bell"],
)
def test_an_escape_may_not_make_characters_the_file_could_not_hold(escape: str, code: str) -> None:
    # A control character would reach terminals and generated files; a lone surrogate cannot even be written out.
    old = 'runtime: "Framework, its CUDA libraries, JupyterLab and the package set."'
    text = _edit(old, f'runtime: "Framework{escape}"')
    assert _report(text) == (
        f"error: matrix.yaml:{_line_of(text, 'runtime: ')}: a value holds U+{code}, "
        "a character YAML files may not contain"
    )


def test_a_control_character_in_the_file_names_its_line() -> None:
    text = _edit("release: v0.9", "release: v0.9\x00")
    assert _report(text) == (
        f"error: matrix.yaml:{_line_of(text, 'release: ')}: not valid YAML: the character U+0000 is not allowed"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('python: "3.8"', 'python: "3.' + "8" * 5000 + '"'),  # a version part over int()'s 4,300 digits
        ("release: v0.9", "release: v0." + "9" * 5000),
        ("min_driver: 520.61.05", "min_driver: " + "5" * 5000 + ".1"),
    ],
    ids=["os-python", "release", "driver"],
)
def test_a_value_over_the_length_limit_is_refused(old: str, new: str) -> None:
    text = _edit(old, new) if MATRIX_TEXT.count(old) == 1 else MATRIX_TEXT.replace(old, new, 1)
    assert _report(text) == (f"error: matrix.yaml:{_line_of(text, new)}: a value longer than {MAX_VALUE} characters")


def test_a_duplicate_anchor_names_both_lines() -> None:
    text = "a: &x 1\nb: &x 2\n"
    assert (
        _report(text) == "error: matrix.yaml:2: not valid YAML: found duplicate anchor 'x'; first occurrence at line 1"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("schema_version: 1", "schema_version: 99999999999999999999999"),
        ("min_driver: 520.61.05", "min_driver: 99999999999999999999.1"),
        ("toolkit: 11.8.0", "toolkit: 11.8.99999999999999999999999"),
        ('python: "3.8"', 'python: "3.99999999999999999999"'),
    ],
    ids=["schema-version", "driver", "toolkit", "os-python"],
)
def test_huge_numbers_are_input_errors_or_values_never_tracebacks(old: str, new: str) -> None:
    text = MATRIX_TEXT.replace(old, new, 1)
    assert text != MATRIX_TEXT
    try:
        parse_matrix(text)
    except InputError as error:
        assert error.problems
