"""The one Jinja environment over templates/: the Dockerfiles (render) and the docs' generated blocks (matrixdocs,
templates/docs/) render in it, strict about undefined names, a block tag's line leaving no trace in the output."""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES_DIR = "templates"


def environment(root: Path) -> jinja2.Environment:
    """Jinja over the templates of the repo at `root`, with the filter `md` for Markdown table cells."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root / TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - Dockerfiles and Markdown, not HTML
    )
    env.filters["md"] = md
    return env


def md(text: str) -> str:
    """Text for a Markdown table cell: a `|` in it would end the cell."""
    return text.replace("|", "\\|")
