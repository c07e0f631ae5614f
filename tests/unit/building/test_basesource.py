"""basesource.py without Docker: where bases come from (Docker Hub, a profile's registry, --base-registry), what a
build starts FROM and labels, what `invoke bases.mirror` copies, and the advice when a base cannot be had. The real
registry and engine: tests/image/test_base_registry.py."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts.baseslock import BaseLock
from dlimages.building.advice import bases_unavailable
from dlimages.building.basesource import (
    BaseChoice,
    BaseSource,
    BaseUnavailable,
    Copied,
    Copy,
    choose,
    choose_all,
    mirror_copies,
    qualified,
    registry_path,
    resolve,
)
from dlimages.building.plan import Secrets, plan_builds
from dlimages.core.errors import InputError
from dlimages.core.grammar import reference_problem
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell, Expansion
from dlimages.model.selection import flags_for
from dlimages.model.spec import Matrix

UBUNTU = "ubuntu:22.04"
CUDA = "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"
LOCAL_BASE = "dlimages/base:debian12"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
OWN = "127.0.0.1:5000/mirror"


@pytest.fixture
def make_cell(expansion: Expansion) -> Callable[..., Cell]:
    def _make(base_image: str, *, bootstrap: bool = False) -> Cell:
        return dataclasses.replace(expansion.cells[0], base_image=base_image, bootstrap_base=bootstrap)

    return _make


@pytest.mark.parametrize(
    ("ref", "path", "name"),
    [
        (UBUNTU, "library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        (CUDA, CUDA, f"docker.io/{CUDA}"),
        ("docker.io/library/ubuntu:22.04", "library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("docker.io/ubuntu:22.04", "library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        (LOCAL_BASE, LOCAL_BASE, f"docker.io/{LOCAL_BASE}"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        # A host as one path part, which docker's grammar keeps to lowercase letters, digits and . _ - (no ':').
        ("127.0.0.1:5000/x/y:1", "127.0.0.1_5000/x/y:1", "127.0.0.1:5000/x/y:1"),
        ("localhost:5000/x/y:1", "localhost_5000/x/y:1", "localhost:5000/x/y:1"),
        ("Registry.Example.com/x:1", "registry.example.com/x:1", "Registry.Example.com/x:1"),
        ("[::1]:5000/x:1", "ipv6-0000-0000-0000-0000-0000-0000-0000-0001_5000/x:1", "[::1]:5000/x:1"),
        ("[fe80::]/x:1", "ipv6-fe80-0000-0000-0000-0000-0000-0000-0000/x:1", "[fe80::]/x:1"),
    ],
)
def test_one_rule_maps_a_base_under_any_registry_prefix(ref: str, path: str, name: str) -> None:
    # The form DaoCloud's mirror (m.daocloud.io/docker.io/library/ubuntu:22.04) and Harbor projects use.
    assert registry_path(ref) == path
    assert qualified(ref) == name
    assert reference_problem(f"{OWN}/{path}") is None


def test_the_profile_registry_takes_docker_hub_bases_only(matrix: Matrix, make_cell: Callable[..., Cell]) -> None:
    source = BaseSource.from_flags(matrix, "cloud", None)
    assert source.registry == "hub.cloud.example.net/docker.io"
    assert source.ref_for(make_cell(UBUNTU)) == "hub.cloud.example.net/docker.io/library/ubuntu:22.04"
    assert source.ref_for(make_cell(CUDA)) == f"hub.cloud.example.net/docker.io/{CUDA}"
    # A base made here is not on any public mirror; one pinned by matrix.yaml stays as it is.
    assert source.ref_for(make_cell(LOCAL_BASE, bootstrap=True)) == LOCAL_BASE
    assert source.ref_for(make_cell(f"{UBUNTU}@{D1}")) == f"{UBUNTU}@{D1}"
    [note] = source.notes()
    assert "hub.cloud.example.net/docker.io" in note and "https://cloud.example.net/help/registry" in note
    assert "allow-listed images only, rate-limited" in note


def test_a_profile_without_bases_keeps_docker_hub(matrix: Matrix, make_cell: Callable[..., Cell]) -> None:
    for profile in ("none", "campus", "host"):
        source = BaseSource.from_flags(matrix, profile, None)
        assert source.registry is None and source.notes() == ()
        assert source.ref_for(make_cell(UBUNTU)) == UBUNTU


def test_base_registry_wins_and_takes_the_bases_made_here_too(matrix: Matrix, make_cell: Callable[..., Cell]) -> None:
    source = BaseSource.from_flags(matrix, "cloud", OWN)
    assert source.ref_for(make_cell(UBUNTU)) == f"{OWN}/library/ubuntu:22.04"
    assert source.ref_for(make_cell(LOCAL_BASE, bootstrap=True)) == f"{OWN}/{LOCAL_BASE}"
    assert source.notes() == (f"base images come from {OWN} (--base-registry)",)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "is empty"),
        ("https://127.0.0.1:5000", "has a scheme"),
        ("mirror", "Docker Hub namespace"),
        ("127.0.0.1:5000/Mirror", "has path part 'Mirror'"),
        ("127.0.0.1:99999", "not a number from 1 to 65535"),
    ],
)
def test_a_bad_base_registry_is_named_with_what_is_allowed(matrix: Matrix, value: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        BaseSource.from_flags(matrix, "none", value)
    [problem] = caught.value.problems
    assert problem.where == "--base-registry" and message in problem.message
    assert "host[:port][/path]" in problem.allowed


def test_choose_covers_every_kind_of_base(make_cell: Callable[..., Cell]) -> None:
    lock = BaseLock({UBUNTU: D1})
    own = BaseSource(OWN, "--base-registry", own=True)
    hub = BaseSource()
    ubuntu, cuda, local = make_cell(UBUNTU), make_cell(CUDA), make_cell(LOCAL_BASE, bootstrap=True)

    # Recorded: a mirror serves the digest upstream gave it (copied with --preserve-digests), nothing to ask.
    recorded = choose(ubuntu, own, lock)
    assert (recorded.name, recorded.digest, recorded.resolve) == (f"{OWN}/library/ubuntu:22.04", D1, False)
    assert recorded.build_arg == f"{OWN}/library/ubuntu:22.04@{D1}"
    assert recorded.label_name == f"{OWN}/library/ubuntu:22.04"

    unrecorded = choose(cuda, own, lock)
    assert (unrecorded.name, unrecorded.digest, unrecorded.resolve) == (f"{OWN}/{CUDA}", None, True)

    rehosted_local = choose(local, own, lock)
    assert (rehosted_local.name, rehosted_local.resolve, rehosted_local.local) == (f"{OWN}/{LOCAL_BASE}", True, False)

    made_here = choose(local, hub, lock)
    assert (made_here.name, made_here.local, made_here.label_name, made_here.build_arg) == (
        LOCAL_BASE,
        True,
        LOCAL_BASE,
        LOCAL_BASE,
    )
    from_hub = choose(ubuntu, hub, lock)
    assert (from_hub.build_arg, from_hub.label_name, from_hub.note) == (
        f"{UBUNTU}@{D1}",
        "docker.io/library/ubuntu:22.04",
        None,
    )
    unpinned = choose(cuda, hub, lock)
    assert unpinned.build_arg == CUDA and unpinned.note is not None and "not reproducible" in unpinned.note
    pinned_by_matrix = choose(make_cell(f"ubuntu:24.04@{D2}"), own, lock)
    assert (pinned_by_matrix.name, pinned_by_matrix.digest) == ("ubuntu:24.04", D2)


def test_the_plan_passes_the_base_and_its_labels(
    matrix: Matrix, expansion: Expansion, make_cell: Callable[..., Cell], tmp_path: Path
) -> None:
    cell = make_cell(UBUNTU)
    choice = BaseChoice(cell.slug, f"{OWN}/library/ubuntu:22.04", D1)
    source = BaseSource(OWN, "--base-registry", own=True)
    [plan] = plan_builds(matrix, [cell], "none", Secrets(), tmp_path, bases={cell.slug: choice}, source=source)
    assert plan.build_arg("BASE_IMAGE") == f"{OWN}/library/ubuntu:22.04@{D1}"
    assert plan.build_arg("BASE_NAME") == f"{OWN}/library/ubuntu:22.04"
    assert plan.build_arg("BASE_DIGEST") == D1
    assert f"# note: base images come from {OWN} (--base-registry)" in plan.describe()


def skopeo_runner(answers: dict[str, subprocess.CompletedProcess[str]], asked: list[str]) -> Runner:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        ref = argv[-1].removeprefix("docker://")
        asked.append(ref)
        return answers[ref]

    return Runner(run)


def test_resolve_asks_the_registry_once_per_base(expansion: Expansion, matrix: Matrix) -> None:
    name = f"{OWN}/{LOCAL_BASE}"
    choices = {
        "a": BaseChoice("a", name, resolve=True),
        "b": BaseChoice("b", name, resolve=True),
        "c": BaseChoice("c", f"{OWN}/library/ubuntu:22.04", D2),
    }
    asked: list[str] = []
    runner = skopeo_runner({name: subprocess.CompletedProcess([], 0, D1 + "\n", "")}, asked)
    resolved = resolve(choices, runner)
    assert asked == [name]
    assert [(c.name, c.digest, c.resolve) for c in resolved.values()] == [
        (name, D1, False),
        (name, D1, False),
        (f"{OWN}/library/ubuntu:22.04", D2, False),
    ]


def test_an_unreachable_base_registry_says_which_base_where_and_the_ways_out(
    expansion: Expansion, matrix: Matrix
) -> None:
    [cell] = [c for c in expansion.cells if c.bootstrap_base][-1:]
    name = f"127.0.0.1:1/mirror/{LOCAL_BASE}"
    said = 'time="x" level=fatal msg="pinging container registry 127.0.0.1:1: connect: connection refused"'
    runner = skopeo_runner({name: subprocess.CompletedProcess([], 1, "", said)}, [])
    with pytest.raises(BaseUnavailable) as caught:
        resolve({cell.slug: BaseChoice(cell.slug, name, resolve=True)}, runner)
    text = bases_unavailable(caught.value.failed, matrix, expansion.cells, "none")
    assert text.startswith(f"error: The base image {LOCAL_BASE} cannot be pulled from the registry at 127.0.0.1:1")
    assert f"as {name}: connection refused" in text
    assert "`invoke bases.mirror --to 127.0.0.1:1/mirror`" in text
    assert f"`invoke build {flags_for(cell)}` without --base-registry" in text


def test_a_profile_mirror_that_fails_names_it_and_a_registry_of_ones_own(expansion: Expansion, matrix: Matrix) -> None:
    [cell] = [c for c in expansion.cells if not c.bootstrap_base][:1]
    source = BaseSource.from_flags(matrix, "cloud", None)
    name = source.ref_for(cell)
    said = 'time="x" level=fatal msg="pinging container registry hub.cloud.example.net: lookup: no such host"'
    runner = skopeo_runner({name: subprocess.CompletedProcess([], 1, "", said)}, [])
    with pytest.raises(BaseUnavailable) as caught:
        resolve({cell.slug: choose(cell, source, BaseLock())}, runner)
    text = bases_unavailable(caught.value.failed, matrix, expansion.cells, "cloud")
    assert f"through mirror profile cloud's registry mirror hub.cloud.example.net/docker.io, as {name}" in text
    assert "--base-registry HOST[/PREFIX]" in text and "invoke bases.mirror --to HOST[/PREFIX]" in text


def test_mirror_copies_each_base_once_from_where_it_lives(make_cell: Callable[..., Cell]) -> None:
    cells = [make_cell(UBUNTU), make_cell(CUDA), make_cell(UBUNTU), make_cell(LOCAL_BASE, bootstrap=True)]
    extra = ["lab/x:v1", "quay.io/org/y:2"]
    copies = mirror_copies(cells, OWN, BaseLock({UBUNTU: D1}), extra, local=lambda ref: ref == "lab/x:v1")
    assert copies == [
        Copy(f"{UBUNTU}@{D1}", f"{OWN}/library/ubuntu:22.04"),
        Copy(CUDA, f"{OWN}/{CUDA}"),
        Copy(LOCAL_BASE, f"{OWN}/{LOCAL_BASE}", local=True),
        Copy("lab/x:v1", f"{OWN}/lab/x:v1", local=True),
        Copy("quay.io/org/y:2", f"{OWN}/quay.io/org/y:2"),
    ]


def test_a_registry_copy_keeps_every_platform_and_digest(tmp_path: Path) -> None:
    [argv] = Copy(f"{UBUNTU}@{D1}", "registry.example.com/team/library/ubuntu:22.04").commands(tmp_path)
    assert argv[:2] == ["skopeo", "copy"]
    assert {"--all", "--preserve-digests", "--src-tls-verify=true", "--dest-tls-verify=true"} <= set(argv)
    # By digest alone: skopeo refuses a tag with a digest ("Docker references with both a tag and digest are
    # currently not supported"); the tag stays on the destination.
    assert argv[-2:] == [f"docker://ubuntu@{D1}", "docker://registry.example.com/team/library/ubuntu:22.04"]
    assert argv[argv.index("--digestfile") + 1] == str(tmp_path / "copy.digest")


def test_a_local_copy_goes_through_an_archive_and_a_loopback_registry_is_plain_http(tmp_path: Path) -> None:
    save, copy = Copy(LOCAL_BASE, f"{OWN}/{LOCAL_BASE}", local=True).commands(tmp_path)
    assert save == ["docker", "image", "save", "--output", str(tmp_path / "copy.tar"), LOCAL_BASE]
    assert "--all" not in copy and "--preserve-digests" not in copy and "--dest-tls-verify=false" in copy
    assert copy[-2:] == [f"docker-archive:{tmp_path / 'copy.tar'}", f"docker://{OWN}/{LOCAL_BASE}"]


@pytest.mark.parametrize(
    ("to", "extra", "where"),
    [("", [], "--to"), ("http://x.example", [], "--to"), (OWN, ["lab/x"], "--image 'lab/x'")],
)
def test_mirror_refuses_what_it_cannot_copy(
    make_cell: Callable[..., Cell], to: str, extra: list[str], where: str
) -> None:
    with pytest.raises(InputError) as caught:
        mirror_copies([make_cell(UBUNTU)], to, BaseLock(), extra, local=lambda _: False)
    assert caught.value.problems[0].where == where


def test_an_image_by_digest_alone_lands_under_its_digest_never_as_latest(
    make_cell: Callable[..., Cell], tmp_path: Path
) -> None:
    to = "localhost:5000/team"
    extra = [f"lab/x@{D2}", f"localhost:5001/lab/y:1@{D1}", "Reg.Example.com:5002/z:3"]
    copies = mirror_copies([make_cell(f"ubuntu@{D2}")], to, BaseLock(), extra, local=lambda _: True)
    assert copies == [
        Copy(f"ubuntu@{D2}", f"{to}/library/ubuntu@{D2}"),
        # A digest names what its registry serves: copied from there, even when this engine has the image.
        Copy(f"lab/x@{D2}", f"{to}/lab/x@{D2}"),
        Copy(f"localhost:5001/lab/y:1@{D1}", f"{to}/localhost_5001/lab/y:1"),
        Copy("Reg.Example.com:5002/z:3", f"{to}/reg.example.com_5002/z:3", local=True),
    ]
    copy_argvs = [item.commands(tmp_path)[-1] for item in copies]
    assert [argv[-2] for argv in copy_argvs[:3]] == [
        f"docker://ubuntu@{D2}",
        f"docker://lab/x@{D2}",
        f"docker://localhost:5001/lab/y@{D1}",
    ]
    for argv in copy_argvs:
        destination = argv[-1].removeprefix("docker://")
        assert reference_problem(destination) is None and not destination.endswith(":latest")
        assert "--dest-tls-verify=false" in argv  # localhost: plain HTTP allowed
    copied = Copied(copies[1], 3.0, D2)
    assert str(copied) == f"copied lab/x@{D2} -> {to}/lab/x@{D2} (3 s)"


def test_a_destination_docker_would_refuse_is_exit_2_before_skopeo(make_cell: Callable[..., Cell]) -> None:
    to = "r.example/" + "/".join(["p" * 60] * 4)  # 253 characters: a valid registry, no room for a name under it
    with pytest.raises(InputError) as caught:
        mirror_copies([make_cell(UBUNTU)], to, BaseLock(), ["lab/x:1"], local=lambda _: False)
    assert [(p.where, p.message) for p in caught.value.problems] == [
        ("--to", f"with {UBUNTU} makes a name of 274 characters, which is longer than 255 characters"),
        ("--to", "with lab/x:1 makes a name of 261 characters, which is longer than 255 characters"),
    ]


def test_a_base_registry_that_leaves_no_room_for_a_name_is_exit_2(
    matrix: Matrix, make_cell: Callable[..., Cell]
) -> None:
    source = BaseSource.from_flags(matrix, "none", "r.example/" + "/".join(["p" * 60] * 4))
    with pytest.raises(InputError) as caught:
        choose_all([make_cell(UBUNTU), make_cell(UBUNTU)], source, BaseLock())
    assert [(p.where, p.message) for p in caught.value.problems] == [
        ("--base-registry", f"with {UBUNTU} makes a name of 274 characters, which is longer than 255 characters"),
    ]
