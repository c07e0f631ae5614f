"""Build plans for cells of the fixture matrix: the exact docker argv, secrets passed by path only, tags applied
after success."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from uv import find_uv_bin

from dlimages.building.mirrors import resolve
from dlimages.building.plan import BuildPlan, Secrets, plan_build, plan_builds, source_date_epoch, source_revision
from dlimages.commands.builds import stage_uv
from dlimages.core.runner import DEFAULT, Runner
from dlimages.model.cells import Cell, Expansion
from dlimages.model.spec import Matrix

CellLookup = Callable[[str, str], Cell]
REPO = Path(__file__).resolve().parents[3]
CA_CONTENT = "-----BEGIN CERTIFICATE-----\nMIIBsecretCAcontent\n-----END CERTIFICATE-----\n"


@pytest.fixture
def ca_bundle(tmp_path: Path) -> Path:
    path = tmp_path / "corp-ca.pem"
    path.write_text(CA_CONTENT, encoding="utf-8")
    return path


@pytest.fixture
def plan(matrix: Matrix, cell: CellLookup, ca_bundle: Path, tmp_path: Path) -> BuildPlan:
    torch = cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")
    return plan_build(
        torch,
        resolve(matrix, "cloud", torch),
        Secrets(pip_ca=ca_bundle, netrc=tmp_path / "netrc"),
        metadata_file=tmp_path / "build.json",
        revision="abc1234",
    )


def _build_args(argv: list[str]) -> dict[str, str]:
    values = [argv[i + 1] for i, word in enumerate(argv) if word == "--build-arg"]
    return dict(value.split("=", 1) for value in values)


def test_argv_is_a_buildx_build_of_the_cells_dockerfile(plan: BuildPlan, tmp_path: Path) -> None:
    argv = plan.build
    assert argv[:3] == ["docker", "buildx", "build"]
    assert argv[argv.index("--file") + 1] == "images/pytorch/cuda11.8-torch2.1.2-py3.10-runtime/Dockerfile"
    assert argv[argv.index("--metadata-file") + 1] == str(tmp_path / "build.json")
    assert "--iidfile" not in argv  # names the config, which the containerd store does not know (moby#45458)
    # Into the engine's image store (`--load`), its layers uncompressed: the containerd store gzips them otherwise
    assert "--output=type=docker,compression=uncompressed,force-compression=true" in argv and "--load" not in argv
    assert argv[-1] == "images"  # the build context holds the assets and cell.json the Dockerfile copies


def test_argv_never_tags(plan: BuildPlan) -> None:
    # Tags are applied to the image ID only after the build succeeded, so a failed build moves no tag.
    assert not {"-t", "--tag"} & set(plan.build)
    assert not [word for word in plan.build if word.startswith(("--tag=", "-t="))]


def test_argv_passes_the_build_args(plan: BuildPlan) -> None:
    assert _build_args(plan.build) == {
        "BASE_IMAGE": "ubuntu:22.04",
        "BASE_NAME": "docker.io/library/ubuntu:22.04",
        "BASE_DIGEST": "",
        "SOURCE_DATE_EPOCH": "0",
        "CREATED": "1970-01-01T00:00:00Z",  # the same time, as RFC 3339 for the created label
        "REVISION": "abc1234",
        "MIRROR_PROFILE": "cloud",
        "APT_MIRROR": "http://cloud.example.net/ubuntu/",
        "PIP_INDEX_URL": "https://cloud.example.net/pypi/simple/",
        "TORCH_INDEX_URL": "",
        "TORCH_FIND_LINKS": "https://cloud.example.net/pytorch-wheels/cu118/",
    }


def test_base_image_can_be_overridden(matrix: Matrix, cell: CellLookup, tmp_path: Path) -> None:
    tf = cell("tensorflow", "cuda11.0-tf2.4.4-py3.8-devel")
    default = plan_build(tf, resolve(matrix, "none", tf), Secrets(), metadata_file=tmp_path / "iid")
    assert _build_args(default.build)["BASE_IMAGE"] == "nvidia/cuda:11.0.3-cudnn8-devel-ubuntu20.04"
    pinned = "nvidia/cuda:11.0.3-cudnn8-devel-ubuntu20.04@sha256:" + "0" * 64
    override = plan_build(tf, resolve(matrix, "none", tf), Secrets(), base_image=pinned, metadata_file=tmp_path / "iid")
    assert _build_args(override.build)["BASE_IMAGE"] == pinned
    assert _build_args(override.build)["BASE_NAME"] == "docker.io/nvidia/cuda:11.0.3-cudnn8-devel-ubuntu20.04"
    assert _build_args(override.build)["BASE_DIGEST"] == "sha256:" + "0" * 64
    assert "--secret" not in override.build


def test_secrets_are_passed_by_path_never_by_content(plan: BuildPlan, ca_bundle: Path, tmp_path: Path) -> None:
    argv = plan.build
    secrets = [argv[i + 1] for i, word in enumerate(argv) if word == "--secret"]
    assert secrets == [f"id=pip_ca,src={ca_bundle}", f"id=netrc,src={tmp_path / 'netrc'}"]
    for text in (" ".join(argv), plan.describe()):
        assert "MIIBsecretCAcontent" not in text
        assert "BEGIN CERTIFICATE" not in text


def test_describe_shows_the_build_and_a_tag_command_per_ref(plan: BuildPlan, tmp_path: Path) -> None:
    lines = plan.describe().splitlines()
    assert lines[0] == "# test/pytorch-dev:v0.9-cuda11.8-torch2.1.2-py3.10-runtime"
    assert shlex.split(lines[1]) == plan.build
    assert lines[2].startswith("# then: IMAGE=the containerimage.config.digest (classic store) or")
    assert lines[2].endswith(f"of {tmp_path / 'build.json'}")
    assert lines[3:] == [
        'docker tag "$IMAGE" test/pytorch-dev:v0.9-cuda11.8-torch2.1.2-py3.10-runtime',
        'docker tag "$IMAGE" test/pytorch-dev:v0.9',
    ]


def test_describe_shows_the_mirror_notes(matrix: Matrix, cell: CellLookup, tmp_path: Path) -> None:
    torch = cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")
    text = plan_build(torch, resolve(matrix, "campus", torch), Secrets(), metadata_file=tmp_path / "iid").describe()
    assert "# note: campus does not mirror PyTorch's cu118 wheels;" in text


def test_tag_commands_cover_every_ref(plan: BuildPlan) -> None:
    assert plan.tag_commands("sha256:1234") == [
        ["docker", "tag", "sha256:1234", "test/pytorch-dev:v0.9-cuda11.8-torch2.1.2-py3.10-runtime"],
        ["docker", "tag", "sha256:1234", "test/pytorch-dev:v0.9"],
    ]


def git(root: Path, *args: str) -> None:
    done = DEFAULT(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args])
    assert done.ok, done.err


def test_the_source_revision_is_the_commit_and_says_when_the_tree_is_dirty(tmp_path: Path) -> None:
    assert source_revision(tmp_path, DEFAULT) == "unknown"  # not a git checkout
    git(tmp_path, "init", "-q")
    assert source_revision(tmp_path, DEFAULT) == "unknown"  # no commit yet
    (tmp_path / "matrix.yaml").write_text("a: 1\n")
    git(tmp_path, "add", "matrix.yaml")
    git(tmp_path, "commit", "-q", "-m", "first")
    head = DEFAULT(["git", "-C", str(tmp_path), "rev-parse", "HEAD"]).out.strip()
    assert source_revision(tmp_path, DEFAULT) == head
    (tmp_path / "matrix.yaml").write_text("a: 2\n")
    assert source_revision(tmp_path, DEFAULT) == f"{head}-dirty"


def test_without_git_the_revision_is_unknown(tmp_path: Path) -> None:
    def no_git(argv: list[str], **_: Any) -> Any:
        raise FileNotFoundError(argv[0])

    assert source_revision(tmp_path, Runner(no_git)) == "unknown"


def test_every_plan_labels_the_image_with_the_revision(matrix: Matrix, expansion: Expansion, tmp_path: Path) -> None:
    revision = "0" * 40
    plans = plan_builds(matrix, expansion.cells[:2], "none", Secrets(), tmp_path, revision)
    assert all(f"REVISION={revision}" in plan.build for plan in plans)


def test_source_date_epoch_is_the_last_commit_that_changed_the_cell(
    tmp_path: Path, expansion: Expansion, matrix: Matrix
) -> None:
    """Same commit, same epoch; a commit elsewhere (a shared asset too) keeps it and so the build cache; one touching
    the cell moves it."""
    first, other = expansion.cells[0], expansion.cells[1]
    assert source_date_epoch(tmp_path, first, DEFAULT) == 0  # not a git checkout
    git(tmp_path, "init", "-q")
    for c in (first, other):
        folder = tmp_path / "images" / c.framework / c.slug
        folder.mkdir(parents=True)
        (folder / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "images/assets").mkdir()
    (tmp_path / "images/assets/zshrc").write_text("\n")
    git(tmp_path, "add", ".")
    env_commit = ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q"]
    DEFAULT(["git", "-C", str(tmp_path), *env_commit, "-m", "one"], env={"GIT_COMMITTER_DATE": "@1700000000 +0000",
            "GIT_AUTHOR_DATE": "@1700000000 +0000", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert source_date_epoch(tmp_path, first, DEFAULT) == 1700000000
    (tmp_path / "images" / other.framework / other.slug / "Dockerfile").write_text("FROM scratch\n# changed\n")
    git(tmp_path, "add", ".")
    DEFAULT(["git", "-C", str(tmp_path), *env_commit, "-m", "two"], env={"GIT_COMMITTER_DATE": "@1700000500 +0000",
            "GIT_AUTHOR_DATE": "@1700000500 +0000", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert source_date_epoch(tmp_path, first, DEFAULT) == 1700000000
    assert source_date_epoch(tmp_path, other, DEFAULT) == 1700000500
    (tmp_path / "images/assets/zshrc").write_text("# a shared asset changed\n")
    git(tmp_path, "add", ".")
    DEFAULT(["git", "-C", str(tmp_path), *env_commit, "-m", "three"], env={"GIT_COMMITTER_DATE": "@1700000900 +0000",
            "GIT_AUTHOR_DATE": "@1700000900 +0000", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert source_date_epoch(tmp_path, first, DEFAULT) == 1700000000
    plans = plan_builds(matrix, [first], "none", Secrets(), tmp_path, "r", {first.slug: 1700000000})
    assert "SOURCE_DATE_EPOCH=1700000000" in plans[0].build
    assert "--provenance=false" in plans[0].build and "--sbom=false" in plans[0].build


def test_a_cell_whose_locked_steps_run_uv_gets_the_uv_context(
    real_matrix: Matrix, real_expansion: Expansion, tmp_path: Path
) -> None:
    """The repo's locked PyPI cells bind uv from the build context `uv` (staged at .work/uv), the others never."""
    by_slug = {cell.slug: cell for cell in real_expansion.cells}
    locked, unlocked = by_slug["cuda12.1-torch2.1.2-py3.11-runtime"], by_slug["cuda11.8-torch2.1.2-py3.10-runtime"]
    plans = plan_builds(real_matrix, [locked, unlocked], "none", Secrets(), tmp_path, root=REPO)
    assert [plan.uv for plan in plans] == [True, False]
    assert shlex.join(["--build-context", "uv=.work/uv"]) in shlex.join(plans[0].build)
    assert "uv=" not in " ".join(plans[1].build)
    for plan in plans:  # the context matches what the committed Dockerfile mounts
        assert ("from=uv" in (REPO / plan.cell.dockerfile).read_text()) == plan.uv


def test_stage_uv_copies_the_pinned_uv_once_and_executable(tmp_path: Path) -> None:
    staged = stage_uv(tmp_path)
    assert staged == tmp_path / ".work/uv/uv" and staged.read_bytes() == Path(find_uv_bin()).read_bytes()
    assert os.access(staged, os.X_OK) and staged.stat().st_mode & 0o005 == 0o005  # the image user runs it
    before = staged.stat().st_ino
    assert stage_uv(tmp_path).stat().st_ino == before  # the same: not written again
    staged.write_bytes(b"an older uv")
    assert stage_uv(tmp_path).read_bytes() == Path(find_uv_bin()).read_bytes()
    assert sorted(path.name for path in staged.parent.iterdir()) == ["uv"]
