"""Tag rules: slug, immutable tag and refs of a cell, where the moving tags go, and that no tag names two cells."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlimages.core.errors import InputError
from dlimages.model import tags
from dlimages.model.cells import Cell, Expansion, expand
from dlimages.model.compat import Candidate
from dlimages.model.spec import Matrix, version_key

REPO = Path(__file__).resolve().parents[3]
DOCKER_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

CellLookup = Callable[[str, str], Cell]
Parse = Callable[[dict[str, Any] | str], Matrix]


def _newest(matrix: Matrix, framework: str, partial: str, cuda: str) -> str:
    """The newest release of the matrix named by a partial version and published for this CUDA version."""
    releases = matrix.frameworks[framework].releases
    named = [v for v, r in releases.items() if (v == partial or v.startswith(f"{partial}.")) and cuda in r.variants]
    return max(named, key=version_key)


@pytest.mark.parametrize(
    ("point", "slug"),
    [
        (Candidate("pytorch", "2.1.2", "11.8", "3.10", "runtime"), "cuda11.8-torch2.1.2-py3.10-runtime"),
        (Candidate("tensorflow", "2.4.4", "11.0", "3.8", "devel"), "cuda11.0-tf2.4.4-py3.8-devel"),
    ],
)
def test_slug_names_every_axis_with_the_frameworks_flag(point: Candidate, slug: str) -> None:
    assert tags.slug(point) == slug
    assert tags.immutable_tag("v2.0", point) == f"v2.0-{slug}"


def test_image_refs_put_each_tag_on_the_image_name() -> None:
    assert tags.image_refs("lab/x", ["v1-a", "v1"]) == ("lab/x:v1-a", "lab/x:v1")


def test_cell_tags_are_its_immutable_tag_then_its_moving_tags(cell: CellLookup) -> None:
    torch = cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")
    assert torch.immutable_tag == "v0.9-cuda11.8-torch2.1.2-py3.10-runtime"
    assert torch.tags == (torch.immutable_tag, *torch.aliases)
    assert torch.refs == tuple(f"test/pytorch-dev:{tag}" for tag in torch.tags)
    assert torch.dockerfile == "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/Dockerfile"


def test_release_tag_is_only_on_each_image_default_cell(matrix: Matrix, expansion: Expansion) -> None:
    expected = set()
    for framework, image in matrix.images.items():
        d = image.default
        newest = _newest(matrix, framework, d.version, d.cuda)
        slug = tags.slug(Candidate(framework, newest, d.cuda, d.python, d.flavor))
        expected.add((f"{image.name}:{matrix.release}-{slug}", f"{image.name}:{matrix.release}"))
    assert {c.refs for c in expansion.cells if c.aliases} == expected


def test_an_alias_adds_a_moving_tag_to_the_newest_matching_cell(data: dict[str, Any], parse: Parse) -> None:
    data["images"]["pytorch"]["aliases"] = [
        {"cuda": "12.1", "version": "2", "python": "3.11", "flavor": "runtime", "tag": "latest"}
    ]
    matrix = parse(data)
    aliased = {c.slug: c.aliases for c in expand(matrix).cells if c.framework == "pytorch" and c.aliases}
    assert aliased == {
        "cuda11.8-torch2.1.2-py3.10-runtime": ("v0.9",),
        f"cuda12.1-torch{_newest(matrix, 'pytorch', '2', '12.1')}-py3.11-runtime": ("latest",),
    }


@pytest.mark.parametrize("which", ["fixture", "real"])
def test_refs_are_unique_valid_docker_tags(which: str, request: pytest.FixtureRequest) -> None:
    matrix: Matrix = request.getfixturevalue("matrix" if which == "fixture" else "real_matrix")
    expansion: Expansion = request.getfixturevalue("expansion" if which == "fixture" else "real_expansion")
    refs = [ref for c in expansion.cells for ref in c.refs]
    assert refs and len(refs) == len(set(refs))
    names = {image.name for image in matrix.images.values()}
    for ref in refs:
        name, tag = ref.rsplit(":", 1)
        assert name in names, ref
        assert DOCKER_TAG.fullmatch(tag), ref


def test_each_real_cell_has_its_own_committed_dockerfile(real_expansion: Expansion) -> None:
    paths = [c.dockerfile for c in real_expansion.cells]
    assert len(set(paths)) == len(paths)
    for c in real_expansion.cells:
        assert c.dockerfile == f"images/{c.framework}/{c.slug}/Dockerfile"
        assert (REPO / c.dockerfile).is_file(), c.dockerfile


# --- Which names CI publishes -----------------------------------------------------------------------------------

COMMIT = "1a2b3c4d5e6f" + "7" * 28
IMMUTABLE, RELEASE = "lab/x:v1.0-cuda11.8-torch2.1.2-py3.10-runtime", "lab/x:v1.0"


def origin(git_ref: str, default_branch: str = "main") -> tags.Origin:
    found = tags.Origin.from_flags(git_ref, default_branch, COMMIT)
    assert found is not None
    return found


def test_release_tags_come_only_from_the_default_branch() -> None:
    assert origin("refs/heads/main").releases
    for other in (
        "refs/heads/feature",
        "refs/heads/main-fix",
        "refs/heads/x/main",
        "refs/tags/main",
        "refs/pull/1/merge",
    ):
        assert not origin(other).releases, other
    assert origin("refs/heads/trunk", "trunk").releases


def test_a_build_of_another_branch_is_published_under_its_immutable_tag_and_the_commit() -> None:
    built, moving = [IMMUTABLE, RELEASE], {RELEASE}
    assert tags.published_refs(built, moving, None) == {IMMUTABLE: IMMUTABLE, RELEASE: RELEASE}  # by hand
    assert tags.published_refs(built, moving, origin("refs/heads/main")) == {IMMUTABLE: IMMUTABLE, RELEASE: RELEASE}
    named = tags.published_refs(built, moving, origin("refs/heads/feature"))
    assert named == {IMMUTABLE: f"{IMMUTABLE}-1a2b3c4d5e6f"}
    assert DOCKER_TAG.fullmatch(named[IMMUTABLE].split(":", 1)[1])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("refs/heads/x", None, None), ["--default-branch", "--commit"]),
        ((None, "main", COMMIT), ["--git-ref"]),
        (("main", "main", COMMIT), ["--git-ref"]),  # a ref, not a branch name
        (("refs/heads/x", "-main", COMMIT), ["--default-branch"]),
        (("refs/heads/x", "main", COMMIT[:12]), ["--commit"]),  # the full SHA
        (("refs/heads/x", "main", COMMIT.upper()), ["--commit"]),
        (("refs/heads/x y", "main", COMMIT), ["--git-ref"]),
    ],
)
def test_the_ci_flags_go_together_and_each_bad_one_is_named(flags: tuple[str | None, ...], named: list[str]) -> None:
    assert tags.Origin.from_flags(None, None, None) is None
    with pytest.raises(InputError) as caught:
        tags.Origin.from_flags(*flags)
    assert [problem.where for problem in caught.value.problems] == named


def _labels(cell: Cell, version: str | None = None, revision: str = "1" * 40) -> dict[str, str]:
    return {
        tags.CELL_LABEL: cell.slug,
        tags.VERSION_LABEL: version or cell.immutable_tag,
        tags.REVISION_LABEL: revision,
    }


def test_a_name_must_hold_the_image_it_names(real_expansion: Expansion) -> None:
    """What `verify`, `smoke` and `bench` check after the signature: before, a signed image of one cell copied
    under another cell's tag verified, and so did an older release's image moved under this release's tag."""
    default = next(c for c in real_expansion.cells if len(c.refs) > 1)  # has the release tag
    other = next(c for c in real_expansion.cells if c.image == default.image and c is not default)
    [immutable, release, *_] = default.refs
    cells = real_expansion.cells
    assert tags.name_problems(immutable, _labels(default), cells) == []
    assert tags.name_problems(release, _labels(default), cells) == []  # a moving tag, at the cell it points to
    assert tags.name_problems(f"mirror/team/{immutable}", _labels(default), cells) == []  # a mirror's prefix
    assert tags.name_problems(f"{default.image}@sha256:{'a' * 64}", _labels(other), cells) == []  # content only
    [swapped] = tags.name_problems(immutable, _labels(other), cells)
    assert swapped == (
        f"{immutable} names the cell {default.slug} ({default.immutable_tag}), but the image is {other.slug} "
        f"({other.immutable_tag}): another image under this name"
    )
    assert tags.name_problems(release, _labels(other), cells)  # the release tag moved to another cell
    older = default.immutable_tag.replace(default.immutable_tag.split("-", 1)[0], "v0.9", 1)
    assert tags.name_problems(immutable, _labels(default, older), cells)  # rolled back to an older release
    assert tags.name_problems(f"{default.image}:{older}", _labels(default, older), cells) == []  # its own name
    branch = f"{immutable}-{'1' * tags.COMMIT_DIGITS}"
    assert tags.name_problems(branch, _labels(default), cells) == []  # a branch build: its commit appended
    [stranger] = tags.name_problems(f"{default.image}:latest", _labels(default), cells)
    assert stranger.endswith(
        f"the tag latest names no cell of matrix.yaml, nor the image's version ({immutable.split(':')[1]})"
    )
