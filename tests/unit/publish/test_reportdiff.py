"""The package changes between two sets of build reports (`invoke package-diff`): the diff, its Markdown, and the
reports read as untrusted input through the real command line: every bad one is exit 2 naming the flag, with
nothing printed on stdout and no traceback; a FIFO is never opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from invoke.program import Program

from dlimages.publish.reportdiff import MAX_FILE_BYTES, diff_markdown, escape, report_diff

REPO = Path(__file__).resolve().parents[3]


def entry(cell: str | None, pip: dict[str, str] | None, dpkg: dict[str, str], ref: str = "lab/x:v1") -> dict[str, Any]:
    return {"ref": ref, "cell": cell, "image": {"pip": pip, "dpkg": dpkg}, "pushed": []}


def write(folder: Path, *entries: dict[str, Any], name: str = "build-report.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(list(entries)))
    return folder


def package_diff(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """`invoke package-diff ARGS` from the repo root, by Invoke's own Program in this process."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))  # Invoke puts the folder of tasks.py first
    code: int = 0
    try:
        Program(name="Invoke", binary="inv[oke]").run(["invoke", "package-diff", *args])
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else (0 if stopped.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_diff_names_each_package_that_moved_came_or_went_per_cell() -> None:
    before = {
        "a": {"pip": {"numpy": "1.26.3", "tqdm": "4.66.1"}, "dpkg": {"libssl3": "3.0.11", "zsh": "5.9"}},
        "b": {"pip": {"numpy": "1.26.3"}, "dpkg": {}},
        "gone": {"pip": {}, "dpkg": {}},
    }
    after = {
        "a": {"pip": {"numpy": "1.26.4", "Pillow": "10.2.0", "tqdm": "4.66.1"}, "dpkg": {"libssl3": "3.0.13"}},
        "b": {"pip": {"numpy": "1.26.3"}, "dpkg": {}},
        "new": {"pip": {}, "dpkg": {}},
    }
    diff = report_diff(before, after)
    assert [(c.kind, c.name, c.before, c.after) for c in diff.changed["a"]] == [
        ("pip", "numpy", "1.26.3", "1.26.4"),
        ("pip", "Pillow", None, "10.2.0"),
        ("dpkg", "libssl3", "3.0.11", "3.0.13"),
        ("dpkg", "zsh", "5.9", None),
    ]
    assert (diff.unchanged, diff.new, diff.missing) == (("b",), ("new",), ("gone",))
    text = diff_markdown(diff)
    assert "### a\n" in text and "| pip | numpy | 1.26.3 | 1.26.4 |" in text and "| dpkg | zsh | 5.9 | (gone) |" in text
    assert "| pip | Pillow | (new) | 10.2.0 |" in text and "### b" not in text
    assert "Unchanged (1): b" in text and "New (1): new" in text and "Not rebuilt (1): gone" in text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a|b", "a\\|b"),
        ("<img src=x onerror=alert(1)>", "\\<img src\\=x onerror\\=alert\\(1\\)\\>"),
        ("[x](http://evil)", "\\[x\\]\\(http\\:\\/\\/evil\\)"),
        ("**bold** _it_ `code` ~~s~~ &amp;", "\\*\\*bold\\*\\* \\_it\\_ \\`code\\` \\~\\~s\\~\\~ \\&amp\\;"),
        ("line\n# heading\r\x1b[31m", "line\ufffd\\# heading\ufffd\ufffd\\[31m"),
        ("1:2.36-9+deb12u4", "1\\:2.36-9\\+deb12u4"),
        ("evil\u202egpj.exe", "evil\ufffdgpj.exe"),
        ("".join(map(chr, [0x61C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])), "\ufffd" * 12),
        ("a\u200bb\u200cc\u200dd\u2060e\ufeff", "a\ufffdb\ufffdc\ufffdd\ufffde\ufffd"),
    ],
)
def test_markdown_special_characters_are_escaped(text: str, shown: str) -> None:
    assert escape(text) == shown


def test_names_versions_and_cells_reach_the_markdown_escaped() -> None:
    diff = report_diff({"c|1": {"pip": {"x|y": "1"}, "dpkg": {}}}, {"c|1": {"pip": {"x|y": "<b>2</b>"}, "dpkg": {}}})
    text = diff_markdown(diff)
    assert "### c\\|1\n" in text and "| pip | x\\|y | 1 | \\<b\\>2\\<\\/b\\> |" in text and "<b>" not in text


def test_invoke_package_diff_prints_the_markdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = write(tmp_path / "before/report-a", entry("a", {"numpy": "1"}, {})).parent
    after = write(tmp_path / "after/report-a", entry("a", {"numpy": "2"}, {}), entry(None, None, {}, "lab/y:v1")).parent
    code, out, _ = package_diff(monkeypatch, capsys, "--before", str(before), "--after", str(after))
    assert code == 0 and "| pip | numpy | 1 | 2 |" in out and "New (1): lab\\/y\\:v1" in out
    code, out, _ = package_diff(monkeypatch, capsys, "--before", str(tmp_path / "none"), "--after", str(after))
    assert code == 0 and "No earlier build report" in out


def test_the_same_cell_in_two_reports_counts_once_when_they_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "before/r1", entry("a", {"numpy": "1"}, {}))
    write(tmp_path / "after/r1", entry("a", {"numpy": "2"}, {}))
    write(tmp_path / "after/r2", entry("a", {"numpy": "2"}, {}))
    code, out, err = package_diff(
        monkeypatch, capsys, "--before", str(tmp_path / "before"), "--after", str(tmp_path / "after")
    )
    assert code == 0, err
    assert out.count("### a\n") == 1 and out.count("| pip | numpy | 1 | 2 |") == 1


def test_the_same_cell_with_other_packages_in_two_reports_is_exit_2_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "after/r1", entry("a", {"numpy": "1"}, {}))
    write(tmp_path / "after/r2", entry("a", {"numpy": "2"}, {}))
    code, out, err = package_diff(monkeypatch, capsys, "--after", str(tmp_path / "after"))
    assert (code, out) == (2, "") and "Traceback" not in err
    first, second = tmp_path / "after/r1/build-report.json", tmp_path / "after/r2/build-report.json"
    assert err.startswith(f"error: --after {second}: entry 1:"), err
    assert f"cell 'a' than {first}" in err and "allowed: one report per cell" in err, err


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _big(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: costs no disk


def _text(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)


GOOD = json.dumps([entry("a", {"numpy": "1"}, {})])
BAD_INPUTS: dict[str, tuple[Any, str, str]] = {
    # id: (how to break it, the flag named, what the message says)
    "after-missing-flag": (None, "--after", "give the folder of this build's reports"),
    "after-absent": (lambda root: None, "--after", "no build report (*.json) under"),
    "after-empty": (lambda root: (root / "after").mkdir(), "--after", "no build report (*.json) under"),
    "after-is-a-file": (lambda root: _text(root / "after", GOOD), "--after", "is not a folder"),
    "after-is-a-fifo": (lambda root: _fifo(root / "after"), "--after", "is not a folder"),
    "before-is-a-fifo": (
        lambda root: _text(root / "after/r.json", GOOD) or _fifo(root / "before"),
        "--before",
        "is not a folder",
    ),
    "report-is-a-fifo": (lambda root: _fifo(root / "after/r/build-report.json"), "--after", "is not a regular file"),
    "report-links-to-a-device": (
        lambda root: (root / "after").mkdir() or (root / "after/r.json").symlink_to("/dev/zero"),
        "--after",
        "is not a regular file",
    ),
    "report-too-large": (lambda root: _big(root / "after/r.json"), "--after", "is larger than 32 MB"),
    "not-json": (lambda root: _text(root / "after/r.json", "{not json"), "--after", "is not JSON"),
    "not-utf8": (lambda root: _text(root / "after/r.json", b"\xff\xfe[]"), "--after", "is not JSON"),
    "deeply-nested": (lambda root: _text(root / "after/r.json", "[" * 100_000), "--after", "is not JSON"),
    "huge-number": (lambda root: _text(root / "after/r.json", "[" + "9" * 5000 + "]"), "--after", "is not JSON"),
    "an-object": (lambda root: _text(root / "after/r.json", '{"ref": "x"}'), "--after", "is not a build report"),
    "entry-not-an-object": (lambda root: _text(root / "after/r.json", "[1]"), "--after", "entry 1: is not an object"),
    "entry-without-ref": (
        lambda root: _text(root / "after/r.json", '[{"image": {}}]'),
        "--after",
        "entry 1: has neither a cell nor a ref",
    ),
    "pip-not-a-table": (
        lambda root: _text(root / "after/r.json", '[{"ref": "x", "image": {"pip": ["numpy"]}}]'),
        "--after",
        "entry 1: image.pip: is not a table of package names to versions",
    ),
    "version-not-text": (
        lambda root: _text(root / "after/r.json", '[{"ref": "x", "image": {"dpkg": {"zsh": 5}}}]'),
        "--after",
        "image.dpkg: is not a table",
    ),
    "before-broken": (
        lambda root: _text(root / "after/r.json", GOOD) or _text(root / "before/r.json", "[1]"),
        "--before",
        "entry 1: is not an object",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_reports_exit_2_naming_the_flag_with_nothing_printed(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup, flag, message = BAD_INPUTS[case]
    args = []
    if setup is not None:
        setup(tmp_path)
        args = ["--before", str(tmp_path / "before"), "--after", str(tmp_path / "after")]
    code, out, err = package_diff(monkeypatch, capsys, *args)
    assert code == 2, err
    assert out == "" and "Traceback" not in err
    assert err.startswith(f"error: {flag}") and message in err, err


def test_a_path_with_a_nul_byte_is_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = package_diff(monkeypatch, capsys, "--after", "a\0b")
    assert (code, out) == (2, "") and err.startswith("error: --after: cannot read") and "Traceback" not in err


def test_a_fifo_among_the_reports_never_hangs_the_process(tmp_path: Path) -> None:
    write(tmp_path / "after/r1", entry("a", {}, {}))
    _fifo(tmp_path / "after/r2/build-report.json")
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "package-diff", "--after", str(tmp_path / "after")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,  # opening the FIFO would block here for ever
        check=False,
    )
    assert done.returncode == 2 and done.stdout == "" and "is not a regular file" in done.stderr
