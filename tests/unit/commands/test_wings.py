"""docs/architecture.md's table of wings names the package's folders and each one's modules, no more and no fewer:
the one-way rule between them is import-linter's ([tool.importlinter] in pyproject.toml, run by pre-commit)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "src" / "dlimages"


def test_the_wings_table_names_every_wing_and_module() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Wings\n", 1)[1].split("\n## ", 1)[0]
    documented = {
        wing: set(re.findall(r"`([a-z_]+)`", modules))
        for wing, modules in re.findall(r"^\| `([a-z_]+)/`[^|]*\| ([^|]+) \|", section, re.M)
    }
    wings = {
        folder.name: {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
        | {sub.name for sub in folder.iterdir() if (sub / "__init__.py").is_file()}  # a module that grew a folder
        for folder in PACKAGE.iterdir()
        if (folder / "__init__.py").is_file()
    }
    assert documented == wings
