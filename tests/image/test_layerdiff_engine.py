"""layerdiff against the real engine: two builds of one tiny Dockerfile (FROM scratch, COPY of a file whose content
differs), compared through `docker image inspect` and `docker save` as `invoke repro` compares its two builds.

Needs the Docker engine and BuildKit, no base image and no network; the images it builds are removed afterwards.
Without an engine these tests fail, so a broken CI host is not mistaken for a green one; DLIMAGES_NO_DOCKER=1
turns that into a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import require_engine

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.repro.layerdiff import CompareError, compare_images

pytestmark = pytest.mark.integration

BUILD_TIMEOUT_S = 120  # a two-line build, on an engine other work may be keeping busy
MTIME = 1_796_043_731  # both copies of the file get it: content is the one thing that differs
# Into / itself: a folder COPY creates (/etc) would get the time of each build and be named too.
DOCKERFILE = "FROM scratch\nCOPY built-at /built-at\n"

Build = Callable[[str, bytes], str]


@pytest.fixture(scope="module")
def engine() -> None:
    require_engine()


@pytest.fixture
def build(engine: None, tmp_path: Path) -> Iterator[Build]:
    """Builds the Dockerfile with a given /built-at under a tag of its own; removes every tag it made."""
    tags: list[str] = []
    run = uuid.uuid4().hex[:10]

    def _build(name: str, content: bytes) -> str:
        context = tmp_path / name
        context.mkdir()
        (context / "Dockerfile").write_text(DOCKERFILE, encoding="utf-8")
        (context / "built-at").write_bytes(content)
        os.utime(context / "built-at", (MTIME, MTIME))
        tag = f"dlimages-test/layerdiff:{run}-{name}"
        tags.append(tag)
        argv = ("buildx", "build", "--load", "--provenance=false", "--progress=plain", "--tag", tag, str(context))
        done = RUNNER.docker(*argv, timeout=BUILD_TIMEOUT_S)
        assert done.ok, f"docker {' '.join(argv)} exited {done.code}:\n{done.err[-3000:]}"
        return tag

    yield _build
    if tags:
        RUNNER.docker("rmi", *tags)


def test_a_file_whose_content_differs_is_named_in_its_layer(build: Build) -> None:
    first = build("first", b"2026-11-30T13:02:11Z\n")
    second = build("second", b"2026-11-30T13:02:40Z\n")

    result = compare_images(first, second)

    assert not result.identical
    assert (result.first, result.second) == (RUNNER.image_id(first), RUNNER.image_id(second))
    [layer] = result.layers
    assert (layer.index, layer.step) == (0, "COPY built-at /built-at")
    assert [(file.path, file.what) for file in layer.files] == [("/built-at", ("content",))]
    assert "/built-at: content (sha256 " in result.format()


def test_an_image_compared_with_itself_is_identical(build: Build) -> None:
    tag = build("only", b"same\n")
    result = compare_images(tag, tag)
    assert result.identical
    assert result.format().endswith("\nidentical")


def test_a_missing_image_is_named(engine: None) -> None:
    ref = f"dlimages-test/layerdiff:missing-{uuid.uuid4().hex[:10]}"
    with pytest.raises(CompareError, match=rf"cannot compare {ref}: docker image inspect failed: .*{ref}"):
        compare_images(ref, ref)
