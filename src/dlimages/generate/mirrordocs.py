"""docs/offline.md's table of mirror profiles, from matrix.yaml's `mirrors:` (pure): where each profile takes base
images, apt, pip and PyTorch's CUDA wheels from. The built-in `host` profile is the template's last row."""

from __future__ import annotations

from urllib.parse import urlsplit

from jinja2 import Environment

from dlimages.model.spec import Matrix, MirrorProfile

OFFLINE = "docs/offline.md"
Row = tuple[str, ...]


def _rows(name: str, profile: MirrorProfile) -> Row:
    apt = profile.apt.debian if profile.apt else None
    if profile.pytorch_wheels:
        wheels = f"`{profile.pytorch_wheels}` (find-links)"
    elif profile.pypi:  # its pip mirror has no PyTorch CUDA wheels: the build says so and takes them upstream
        wheels = f"not mirrored by {name}: upstream, said in the build log"
    else:
        wheels = "upstream (PyTorch's index)"
    return (
        f"`{name}`",
        profile.description,
        f"`{profile.bases.registry}`" if profile.bases else "Docker Hub",
        f"`{urlsplit(apt).netloc}`" if apt else "upstream",
        f"`{urlsplit(profile.pypi).netloc}`" if profile.pypi else "upstream (PyPI)",
        wheels,
    )


def mirror_table(env: Environment, matrix: Matrix) -> str:
    rows = [_rows(name, profile) for name, profile in matrix.mirrors.items()]
    return env.get_template("docs/mirrors.md.j2").render(rows=rows)
