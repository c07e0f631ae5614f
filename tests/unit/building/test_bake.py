"""The bake document made from build plans (the targets `invoke build` would build, nothing added or lost), and
`invoke build --jobs` without an engine: a fake bake that succeeds, fails, or fails for one cell."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.building.bake import (
    bake_argv,
    bake_document,
    built_images,
    cache_export_problem,
    cache_problems,
    render_bake,
    target,
    target_name,
)
from dlimages.building.builder import run_bake, run_builds
from dlimages.building.mirrors import resolve
from dlimages.building.plan import BuildPlan, Secrets, plan_build
from dlimages.core.imagestore import Built
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell
from dlimages.model.spec import Matrix

CellLookup = Callable[[str, str], Cell]
CA_CONTENT = "-----BEGIN CERTIFICATE-----\nMIIBsecretCAcontent\n-----END CERTIFICATE-----\n"
TORCH = "cuda11.8-torch2.1.2-py3.10-runtime"
TF = "cuda11.0-tf2.4.4-py3.8-devel"


@pytest.fixture
def plans(matrix: Matrix, cell: CellLookup, tmp_path: Path) -> list[BuildPlan]:
    ca_bundle = tmp_path / "corp-ca.pem"
    ca_bundle.write_text(CA_CONTENT, encoding="utf-8")
    (tmp_path / "netrc").write_text("machine example.net login u password SECRETPASSWORD\n", encoding="utf-8")
    secrets = Secrets(pip_ca=ca_bundle, netrc=tmp_path / "netrc")
    torch = dataclasses.replace(cell("pytorch", TORCH), aliases=("v0",))
    tf = cell("tensorflow", TF)
    return [
        plan_build(
            torch, resolve(matrix, "cloud", torch), secrets, metadata_file=tmp_path / "t.json", revision="abc1234"
        ),
        plan_build(
            tf, resolve(matrix, "none", tf), secrets, metadata_file=tmp_path / "f.json", revision="abc1234", epoch=7
        ),
    ]


def targets(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = document["target"]
    return found


def test_one_target_per_plan_in_the_default_group(plans: list[BuildPlan]) -> None:
    document = bake_document(plans)
    names = [target_name(plan) for plan in plans]
    assert names == ["cuda11_8-torch2_1_2-py3_10-runtime", "cuda11_0-tf2_4_4-py3_8-devel"]
    assert document["group"] == {"default": {"targets": sorted(names)}}
    assert sorted(targets(document)) == sorted(names)


def test_targets_carry_each_plans_own_build_args(plans: list[BuildPlan]) -> None:
    found = targets(bake_document(plans))
    for plan in plans:
        args = found[target_name(plan)]["args"]
        assert args == {name: plan.build_arg(name) for name in args} and len(args) == plan.build.count("--build-arg")
    # different mirrors in one file: each target has its own
    assert found[target_name(plans[0])]["args"]["MIRROR_PROFILE"] == "cloud"
    assert found[target_name(plans[1])]["args"]["MIRROR_PROFILE"] == "none"
    assert found[target_name(plans[1])]["args"]["SOURCE_DATE_EPOCH"] == "7"


def test_context_dockerfile_output_and_no_attestations(plans: list[BuildPlan]) -> None:
    body = targets(bake_document(plans))[target_name(plans[0])]
    assert body["context"] == "images"
    assert body["dockerfile"] == f"pytorch/{TORCH}/Dockerfile"  # bake reads it relative to the context
    assert body["output"] == ["type=docker,compression=uncompressed,force-compression=true"]  # EXPORT
    assert body["attest"] == ["type=provenance,disabled=true", "type=sbom,disabled=true"]


def test_secrets_by_path_never_their_content(plans: list[BuildPlan], tmp_path: Path) -> None:
    text = render_bake(bake_document(plans))
    body = targets(json.loads(text))[target_name(plans[0])]
    assert body["secret"] == [f"id=pip_ca,src={tmp_path / 'corp-ca.pem'}", f"id=netrc,src={tmp_path / 'netrc'}"]
    assert "MIIBsecretCAcontent" not in text and "SECRETPASSWORD" not in text


def test_tags_are_the_cells_refs_or_none(plans: list[BuildPlan]) -> None:
    torch = targets(bake_document(plans))[target_name(plans[0])]
    assert torch["tags"] == list(plans[0].cell.refs) and "v0" in " ".join(torch["tags"])
    assert all(body["tags"] == [] for body in targets(bake_document(plans, tags=False)).values())


def test_the_file_is_deterministic_whatever_the_order(plans: list[BuildPlan]) -> None:
    first = render_bake(bake_document(plans))
    assert first == render_bake(bake_document(list(reversed(plans))))
    assert first.endswith("}\n") and json.loads(first)


def test_cache_specs_go_to_every_target(plans: list[BuildPlan]) -> None:
    spec = "type=registry,ref=127.0.0.1:5000/cache:dl"
    document = bake_document(plans, cache_from=[spec], cache_to=[spec + ",mode=max"])
    for body in targets(document).values():
        assert body["cache-from"] == [spec] and body["cache-to"] == [spec + ",mode=max"]
    assert "cache-from" not in json.dumps(bake_document(plans))


def test_a_flag_bake_cannot_express_stops_the_file(plans: list[BuildPlan]) -> None:
    odd = dataclasses.replace(plans[0], build=[*plans[0].build[:-1], "--network=host", "images"])
    with pytest.raises(ValueError, match="--network=host"):
        target(odd)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("type=registry,ref=127.0.0.1:5000/cache:dl", True),
        ("type=registry,ref=ghcr.io/org/cache:dl,mode=max", True),
        ("type=inline", True),
        ("registry", False),
        ("type=registry,ref=a b", False),
        ('type=registry,ref="x"', False),
        ("type=registry;rm -rf /", False),
    ],
)
def test_cache_specs_are_checked(value: str, ok: bool) -> None:
    assert (cache_problems("--cache-to", value) == []) == ok
    assert cache_problems("--cache-to", None) == []


def test_the_docker_driver_exports_only_inline_cache() -> None:
    problem = cache_export_problem("docker", "type=registry,ref=127.0.0.1:5000/cache:dl")
    assert problem is not None and "docker-container" in problem
    assert cache_export_problem("docker", "type=inline") is None
    assert cache_export_problem("docker", None) is None
    assert cache_export_problem("kubernetes", "type=registry,ref=127.0.0.1:5000/cache:dl") is None


def test_built_images_from_the_metadata_file(plans: list[BuildPlan]) -> None:
    config, manifest = "sha256:" + "c" * 64, "sha256:" + "d" * 64
    entry = {"containerimage.config.digest": config, "containerimage.digest": manifest}
    metadata = {target_name(plans[0]): entry, "buildx.build.ref": "x"}
    assert built_images(metadata, plans) == {plans[0].cell.slug: Built(config, manifest)}


def test_bake_argv_writes_metadata() -> None:
    assert bake_argv("b.json", "m.json", no_cache=True) == [
        *("docker", "buildx", "bake", "--file", "b.json", "--progress=plain"),
        *("--metadata-file", "m.json", "--no-cache"),
    ]


def done(code: int, out: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, "")


class FakeBake:
    """`docker buildx bake` that prints `lines`, exits `code` and writes metadata for the `built` targets."""

    def __init__(self, code: int, lines: Sequence[str], built: Sequence[BuildPlan], store: str = "[]") -> None:
        self.code, self.lines, self.built, self.store = code, lines, built, store
        self.tagged: list[str] = []
        self.bakes: list[dict[str, Any]] = []

    def stream(self, argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        assert list(argv[:3]) == ["docker", "buildx", "bake"]
        self.bakes.append(json.loads(Path(argv[argv.index("--file") + 1]).read_text()))
        for line in self.lines:
            on_line(line)
        entry = {"containerimage.config.digest": "sha256:" + "c" * 64, "containerimage.digest": "sha256:" + "d" * 64}
        metadata = {target_name(p): entry for p in self.built}
        Path(argv[argv.index("--metadata-file") + 1]).write_text(json.dumps(metadata))
        return self.code

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "tag":
            self.tagged.append(argv[3])
            self.named = argv[2]
            return done(0)
        if argv[1] == "info":
            return done(0, self.store)
        assert argv[1:4] == ["image", "inspect", "--format"], argv
        return done(0, "123456789\n")


def test_a_bake_that_succeeds_tags_every_cell_afterwards(plans: list[BuildPlan], tmp_path: Path) -> None:
    engine = FakeBake(0, ["#1 DONE"], plans)
    results = run_bake(plans, tmp_path, tmp_path / "work", io.StringIO(), Runner(engine.run, engine.stream))
    assert [r.ok for r in results] == [True, True]
    assert engine.tagged == [*plans[0].cell.refs, *plans[1].cell.refs]
    assert all(body["tags"] == [] for body in engine.bakes[0]["target"].values())  # the bake itself tags nothing
    assert results[0].size == 123456789 and results[0].image_id == "sha256:" + "c" * 64
    assert engine.named == "sha256:" + "c" * 64  # the classic store names an image by its config digest


def test_on_the_containerd_store_the_tags_name_the_manifest(plans: list[BuildPlan], tmp_path: Path) -> None:
    """That store names images by manifest digest: a tag given the config digest fails there (moby#45458)."""
    engine = FakeBake(0, ["#1 DONE"], plans, store='[["driver-type","io.containerd.snapshotter.v1"]]')
    results = run_bake(plans, tmp_path, tmp_path / "work", io.StringIO(), Runner(engine.run, engine.stream))
    assert [r.ok for r in results] == [True, True] and engine.named == "sha256:" + "d" * 64
    assert results[0].image_id == "sha256:" + "c" * 64 and results[0].local_id == "sha256:" + "d" * 64


def test_a_failed_cell_tags_nothing_and_gets_the_advice(plans: list[BuildPlan], tmp_path: Path) -> None:
    failed = target_name(plans[0])
    lines = [
        f"#9 [{failed} 4/9] RUN pip install ...",
        "#9 11.38 ERROR: No matching distribution found for torch==9.9",
        f"#12 [{target_name(plans[1])} 3/7] RUN apt-get ...",
        '#9 ERROR: process "/bin/sh -c pip install ..." did not complete successfully: exit code: 1',
        "#12 CANCELED",
        "ERROR: failed to solve: process did not complete successfully: exit code: 1",  # buildx 0.13 names none
    ]
    engine = FakeBake(1, lines, [])
    results = run_bake(plans, tmp_path, tmp_path / "work", io.StringIO(), Runner(engine.run, engine.stream))
    assert [r.ok for r in results] == [False, False] and engine.tagged == []
    assert results[0].error is not None and "does not exist on the index" in results[0].error
    assert results[1].error is not None and results[1].error.startswith("stopped") and results[1].diagnosis is None


def test_later_buildx_names_the_failed_target(plans: list[BuildPlan], tmp_path: Path) -> None:
    lines = [f"ERROR: target {target_name(plans[1])}: failed to solve: exit code: 1"]
    engine = FakeBake(1, lines, [])
    results = run_bake(plans, tmp_path, tmp_path / "work", io.StringIO(), Runner(engine.run, engine.stream))
    assert results[0].error is not None and results[0].error.startswith("stopped")
    assert results[1].diagnosis is not None


def test_jobs_split_the_cells_into_bakes_and_stop_after_a_failure(plans: list[BuildPlan], tmp_path: Path) -> None:
    engine = FakeBake(0, [], plans)
    runner = Runner(engine.run, engine.stream)
    results = run_builds(
        plans, tmp_path, workdir=tmp_path / "w", bake_jobs=1, keep_going=False, out=io.StringIO(), runner=runner
    )
    assert [len(bake["target"]) for bake in engine.bakes] == [1, 1] and all(r.ok for r in results)

    failing = FakeBake(1, ["ERROR: failed to solve: something"], [])
    runner = Runner(failing.run, failing.stream)
    results = run_builds(
        plans, tmp_path, workdir=tmp_path / "w", bake_jobs=1, keep_going=False, out=io.StringIO(), runner=runner
    )
    assert len(failing.bakes) == 1 and [r.ok for r in results] == [False]
    results = run_builds(
        plans, tmp_path, workdir=tmp_path / "w", bake_jobs=1, keep_going=True, out=io.StringIO(), runner=runner
    )
    assert len(results) == 2 and failing.tagged == []
