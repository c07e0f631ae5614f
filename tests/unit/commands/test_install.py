"""The tests test this checkout: the `dlimages` they import is the one under src/ here.

An editable install made from another checkout (a clean clone CI ran in, say) would otherwise have every unit
test pass or fail for code that is not the code under review.
"""

from __future__ import annotations

from pathlib import Path

import dlimages

REPO = Path(__file__).resolve().parents[3]


def test_the_package_under_test_is_this_checkouts() -> None:
    imported = Path(dlimages.__file__).resolve()
    assert imported.is_relative_to(REPO / "src"), (
        f"dlimages is imported from {imported.parent}, not from {REPO / 'src'}: run "
        "`python3 -m pip install -e '.[dev]'` here (or PYTHONPATH=src) and test again"
    )
