"""Facts about the deep-learning GPU stack that dl-smoke, dl-bench and the dlimages package share.

It travels into every image beside dl-smoke and dl-bench, so like them it is standalone (stdlib only) and stays
compatible with Python 3.8, the oldest Python in the matrix. The package imports it as `dlimages.payload.dl_stack`.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

from typing import NamedTuple


class FrameworkFacts(NamedTuple):
    """How one framework is named everywhere: matrix.yaml, flags, tags, titles and the modules it brings."""

    name: str  # the key in matrix.yaml and cell.json: "pytorch"
    title: str  # how people write it: "PyTorch"
    flag: str  # the command-line flag and the tag's short name: --torch, torch2.1.2
    modules: tuple[str, ...]  # what an image of it imports: the framework first, then its companions


# The one table of frameworks; everything else (validation, tags, titles, dl-smoke, the image tests) reads it.
FRAMEWORKS = {
    facts.name: facts
    for facts in (
        FrameworkFacts("pytorch", "PyTorch", "torch", ("torch", "torchvision", "torchaudio")),
        FrameworkFacts("tensorflow", "TensorFlow", "tf", ("tensorflow",)),
    )
}
