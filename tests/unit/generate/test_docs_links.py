"""Every relative link in README.md, CHANGELOG.md and docs/**/*.md names a file that exists, and every #anchor a
heading (or an explicit id) of the page it points at, by GitHub's slug rules. External links are not fetched."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE_LINK = re.compile(  # [text](target "title"), ![alt](src); a target may hold balanced parentheses
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]"
    r"\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HTML_ID = re.compile(r"<[a-z][^>]*\s(?:id|name)=[\"']([^\"']+)[\"']", re.I)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def prose_lines(text: str, *, blank_code: bool = True) -> list[tuple[int, str]]:
    """The lines of a Markdown page outside fenced and indented code blocks, numbered from 1, with code spans
    blanked (a link written as code is an example, not a link) unless `blank_code` is false (a heading's text)."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    previous_blank = True
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        # An indented code block starts after a blank line; a list item's continuation lines stay prose.
        if previous_blank and (line.startswith("    ") or line.startswith("\t")) and not _in_list(lines):
            continue
        previous_blank = not line.strip()
        lines.append((number, _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) if blank_code else line))
    return lines


def _in_list(lines: list[tuple[int, str]]) -> bool:
    """Whether the last prose lines before a blank one belong to a list item (whose indented lines are its own)."""
    for _, line in reversed(lines):
        if re.match(r"^\s*(?:[-*+]|\d+[.)])\s", line):
            return True
        if line.strip() and not line.startswith((" ", "\t")):
            return False
    return False


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: its rendered text (code, emphasis and link markup dropped) lowercased,
    every character that is not a letter, digit, space, '-' or '_' removed, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|_)(\S(?:.*?\S)?)\1", r"\2", text)  # emphasis around words
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one gets -1, -2, ... as on GitHub) and the ids
    and names of its HTML elements."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    lines = prose_lines(text, blank_code=False)
    for index, (_, line) in enumerate(lines):
        heading = _HEADING.match(line)
        title = heading.group(2) if heading else None
        following = lines[index + 1] if index + 1 < len(lines) else None
        if title is None and line.strip() and following and following[0] == _ + 1 and _SETEXT.match(following[1]):
            title = line.strip()
        if title is None:
            continue
        base = slug(title)
        count = counts.get(base, 0)
        counts[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(_HTML_ID.findall(text))
    return found


def links(page: Path) -> list[Link]:
    """The targets of a page's inline links, images and reference definitions, outside code."""
    found: list[Link] = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        targets = [m.group(1) for m in _INLINE_LINK.finditer(line)]
        reference = _REFERENCE.match(line)
        if reference:
            targets.append(reference.group(1))
        found += [Link(page, number, target) for target in targets if target]
    return found


def broken_links(pages: list[Path], root: Path) -> list[str]:
    """One line per relative link whose file is missing or whose #anchor its page lacks; external links (a scheme
    such as https: or mailto:) are not checked."""
    problems: list[str] = []
    cache: dict[Path, set[str]] = {}
    for link in (link for page in pages for link in links(page)):
        if _EXTERNAL.match(link.target):
            continue
        path_part, _, anchor = link.target.partition("#")
        where = f"{link.page.relative_to(root)}:{link.line}: {link.target}"
        target = (link.page.parent / path_part).resolve() if path_part else link.page
        if not target.exists():
            problems.append(f"{where}: no such file")
            continue
        if not anchor or target.is_dir() or target.suffix != ".md":
            continue
        if target not in cache:
            cache[target] = anchors(target.read_text(encoding="utf-8"))
        if anchor not in cache[target]:
            problems.append(f"{where}: no heading with the anchor #{anchor} in {target.relative_to(root)}")
    return problems


def documents(root: Path) -> list[Path]:
    """The pages whose links are checked: README.md, CHANGELOG.md and docs/**/*.md."""
    pages = [root / name for name in ("README.md", "CHANGELOG.md") if (root / name).is_file()]
    return pages + sorted((root / "docs").rglob("*.md"))


# --- the repository's own pages -----------------------------------------------------------------------------------


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    pages = documents(REPO)
    assert REPO / "README.md" in pages and len(pages) > 10
    assert broken_links(pages, REPO) == []


# --- the checker itself ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Behind the Great Firewall / offline", "behind-the-great-firewall--offline"),
        ("`invoke doctor` on a node", "invoke-doctor-on-a-node"),
        ("Parallel builds (bake, remote and Kubernetes builders)",
         "parallel-builds-bake-remote-and-kubernetes-builders"),
        ("CI after the disk fix (clean clone of 4b832af, fresh dockerd, 2026-11-30)",
         "ci-after-the-disk-fix-clean-clone-of-4b832af-fresh-dockerd-2026-11-30"),
        ("Session 12: the zstd push, 2026-12-02", "session-12-the-zstd-push-2026-12-02"),
        ("The [provisioning guide](docs/provisioning.md) and **bold** words", "the-provisioning-guide-and-bold-words"),
        ("snake_case and --flags", "snake_case-and---flags"),
    ],
)  # fmt: skip
def test_slugs_follow_githubs_rules(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor() -> None:
    assert {"tags", "tags-1", "tags-2", "intro"} <= anchors("# Intro\n\n## Tags\n\n## Tags\n\n## Tags\n")


def _site(tmp_path: Path, page: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/other.md").write_text("# Other page\n\n## A section\n\nText.\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(page, encoding="utf-8")
    return tmp_path


def test_good_links_pass(tmp_path: Path) -> None:
    root = _site(
        tmp_path,
        "# Title\n\n## Set up\n\nSee [the other page](docs/other.md), [its section](docs/other.md#a-section),\n"
        "[this one](#set-up), [a folder](docs/), [a site](https://example.com/x#y) and [mail](mailto:a@b.c).\n\n"
        "[ref]: docs/other.md#other-page\n",
    )
    assert broken_links(documents(root), root) == []


def test_a_planted_broken_link_and_anchor_are_found(tmp_path: Path) -> None:
    root = _site(
        tmp_path,
        "# Title\n\nA [missing page](docs/missing.md), a [missing anchor](docs/other.md#no-such-section),\n"
        "a [local one](#nowhere).\n\n[gone]: docs/gone.md\n",
    )
    assert broken_links(documents(root), root) == [
        "README.md:3: docs/missing.md: no such file",
        "README.md:3: docs/other.md#no-such-section: no heading with the anchor #no-such-section in docs/other.md",
        "README.md:4: #nowhere: no heading with the anchor #nowhere in README.md",
        "README.md:6: docs/gone.md: no such file",
    ]


def test_links_in_code_are_examples_not_links(tmp_path: Path) -> None:
    root = _site(
        tmp_path,
        "# Title\n\nWrite `[x](missing.md)` like this:\n\n    [y](missing.md)\n\n```markdown\n[z](missing.md)\n```\n",
    )
    assert broken_links(documents(root), root) == []


def test_a_heading_inside_a_code_block_is_no_anchor() -> None:
    assert "not-a-heading" not in anchors("# Page\n\n```sh\n# not a heading\n```\n")


def test_a_heading_with_code_keeps_the_codes_text() -> None:
    page = "# Page\n\n## `invoke doctor` on a node\n\nText.\n"
    assert "invoke-doctor-on-a-node" in anchors(page)
    assert anchors("# Page\n\nSetext `title`\n---\n") >= {"page", "setext-title"}
