"""The builder against the real engine: a failed build tags nothing, a good one gets every tag; a hostile mirror
URL never reaches a build, and the mirror step treats whatever value it gets as text.

Uses tiny Dockerfiles on the offline base (`dlimages/base:debian12`), not the heavy cells.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jinja2.utils import Namespace
from support import require_engine

from dlimages.building.basesource import BaseChoice
from dlimages.building.builder import run_build, summary_table
from dlimages.building.mirrors import MirrorArgs
from dlimages.building.plan import BuildPlan
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.generate.project import Project
from dlimages.generate.templating import environment
from dlimages.model.cells import Cell

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BASE = "dlimages/base:debian12"


@pytest.fixture(scope="module")
def cell() -> Cell:
    if os.environ.get("DLIMAGES_NO_DOCKER") == "1":
        pytest.skip("DLIMAGES_NO_DOCKER=1: no Docker engine on this host")
    if not RUNNER.image_exists(BASE):
        pytest.fail(f"{BASE} is missing: run `invoke base` first", pytrace=False)
    real = Project(REPO).expansion.cells[0]
    return dataclasses.replace(real, image=f"lab/test-build-{os.getpid()}", aliases=("v0-alias",))


def plan_for(cell: Cell, tmp_path: Path, body: str) -> BuildPlan:
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\n{body}\n", encoding="utf-8")
    argv = ["docker", "buildx", "build", "--progress=plain", "--load", "--file", str(tmp_path / "Dockerfile")]
    argv += ["--metadata-file", str(tmp_path / "built.json"), str(tmp_path)]
    return BuildPlan(cell, argv, tmp_path / "built.json", MirrorArgs("none"), BaseChoice(cell.slug, BASE, local=True))


def test_failed_build_tags_nothing(cell: Cell, tmp_path: Path) -> None:
    result = run_build(
        plan_for(cell, tmp_path, 'RUN echo "No matching distribution found for torch==9.9" && false'),
        REPO,
        io.StringIO(),
    )
    assert not result.ok
    assert result.error is not None and "does not exist on the index" in result.error
    assert not any(RUNNER.image_exists(ref) for ref in cell.refs)
    assert "FAILED" in summary_table([result])


def test_good_build_gets_every_tag_after_it_succeeded(cell: Cell, tmp_path: Path) -> None:
    out = io.StringIO()
    result = run_build(plan_for(cell, tmp_path, f"RUN echo built-{os.getpid()} > /built"), REPO, out)
    try:
        assert result.ok, result.error
        assert "DONE" in out.getvalue()  # BuildKit's progress was streamed
        assert result.size and result.size > 0
        for ref in cell.refs:
            assert RUNNER.image_id(ref) == result.image_id
    finally:
        RUNNER.docker("rmi", *cell.refs)


# --- Hostile mirror URLs (issue 8) ---------------------------------------------------------------------------

# With this in a profile, a real build printed INJECTED and `uid=0(root)`: sed's `e` flag ran it as a command.
INJECTING_MIRROR = "http://x/;echo${IFS}INJECTED>/dev/stderr;id>/dev/stderr;#e"
DEBIAN_CELL = ("--cuda", "12.1", "--torch", "2.1", "--python", "3.11")  # a Debian 12 cell: the apt.debian mirror


def _ran_the_value(output: str) -> bool:
    """Whether the injected commands ran: their own output lines, not the value quoted in a message."""
    return bool(re.search(r"(^|\s)INJECTED\s*$", output, re.MULTILINE)) or "uid=0(" in output


@pytest.fixture(scope="module")
def engine() -> None:
    require_engine()
    if not RUNNER.image_exists(BASE):
        pytest.fail(f"{BASE} is missing: run `invoke base` first", pytrace=False)


def test_a_real_build_with_an_injecting_mirror_is_refused_before_any_step(engine: None, tmp_path: Path) -> None:
    root = tmp_path / "repo"  # a copy: the real matrix.yaml is never edited
    root.mkdir()
    for name in ("tasks.py", "matrix.yaml"):
        shutil.copy2(REPO / name, root / name)
    for name in ("templates", "images"):
        shutil.copytree(REPO / name, root / name)
    matrix = root / "matrix.yaml"
    text = matrix.read_text(encoding="utf-8")
    clean = "      debian: http://mirrors.tuna.tsinghua.edu.cn/debian/\n"
    assert text.count(clean) == 1
    matrix.write_text(text.replace(clean, f'      debian: "{INJECTING_MIRROR}"\n'), encoding="utf-8")
    # Every docker command the build runs goes through this shim first, which records it.
    calls = tmp_path / "docker-calls"
    shim = tmp_path / "bin/docker"
    shim.parent.mkdir()
    real_docker = shutil.which("docker")
    assert real_docker
    shim.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real_docker} "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    cell_refs = [c.refs[0] for c in Project(REPO).expansion.cells if c.slug == "cuda12.1-torch2.1.2-py3.11-runtime"]
    ids_before = {ref: RUNNER.image_id(ref) for ref in cell_refs}
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "build", *DEBIAN_CELL, "--mirror", "tuna"],
        cwd=root,
        env={**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert result.stderr.strip() == (
        "error: matrix.yaml: mirrors.tuna.apt.debian: the URL has ';' in its path (query strings, fragments and "
        "shell characters are not allowed) (allowed: http(s)://host[:port]/path with letters, digits and "
        ". _ ~ + = , - / %XX)"
    )
    assert not _ran_the_value(output) and "INJECTED" not in output
    docker_calls = calls.read_text(encoding="utf-8") if calls.exists() else ""
    assert "buildx" not in docker_calls, f"a build was started:\n{docker_calls}"
    assert {ref: RUNNER.image_id(ref) for ref in cell_refs} == ids_before  # no image made or retagged
    assert not (root / ".work").exists()  # nothing recorded in the ledger


# Ubuntu 22.04's /etc/apt/sources.list as the official image ships it (comments dropped).
UBUNTU_SOURCES = """\
deb http://archive.ubuntu.com/ubuntu/ jammy main restricted
deb http://archive.ubuntu.com/ubuntu/ jammy-updates main restricted
deb http://archive.ubuntu.com/ubuntu/ jammy universe
deb http://archive.ubuntu.com/ubuntu/ jammy-updates universe
deb http://archive.ubuntu.com/ubuntu/ jammy multiverse
deb http://archive.ubuntu.com/ubuntu/ jammy-updates multiverse
deb http://archive.ubuntu.com/ubuntu/ jammy-backports main restricted universe multiverse
deb http://security.ubuntu.com/ubuntu/ jammy-security main restricted
deb http://security.ubuntu.com/ubuntu/ jammy-security universe
deb http://security.ubuntu.com/ubuntu/ jammy-security multiverse
"""


def _mirror_step(tmp_path: Path, slug: str, build_args: dict[str, str], show: str) -> tuple[str, str]:
    """Build the real mirror step of a real cell (templates/partials/mirrors.j2) on the offline base; return the
    build output and the file `show` in the result. Ubuntu's step runs on a copy of Ubuntu's own sources.list."""
    [real] = [c for c in Project(REPO).expansion.cells if c.slug == slug and c.framework == "pytorch"]
    # The step counter Dockerfile.j2 keeps (a namespace): the mirror step is this Dockerfile's first RUN.
    step = environment(REPO).get_template("partials/mirrors.j2").render(cell=real, step=Namespace(number=0))
    ubuntu = "COPY ubuntu.list /etc/apt/sources.list\n" if real.os_family == "ubuntu" else ""
    (tmp_path / "ubuntu.list").write_text(UBUNTU_SOURCES, encoding="utf-8")
    (tmp_path / "assets").mkdir()  # every step ends with dl-normalize, bind-mounted from the context's assets/
    shutil.copy2(REPO / "templates/assets/dl-normalize", tmp_path / "assets/dl-normalize")
    (tmp_path / "Dockerfile").write_text(
        f'FROM {BASE}\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\nARG SOURCE_DATE_EPOCH=0\n{ubuntu}{step}',
        encoding="utf-8",
    )
    argv = ["buildx", "build", "--progress=plain", "--no-cache", "--load", "--iidfile", str(tmp_path / "iid")]
    for name, value in build_args.items():
        argv += ["--build-arg", f"{name}={value}"]
    built = RUNNER.docker(*argv, str(tmp_path), timeout=300)
    assert built.ok, built.out + built.err
    image = (tmp_path / "iid").read_text(encoding="utf-8").strip()
    try:
        shown = RUNNER.docker("run", "--rm", "--network", "none", image, "cat", show)
        assert shown.ok, shown.err
        return built.out + built.err, shown.out
    finally:
        RUNNER.docker("rmi", image)


DEBIAN_SLUG = "cuda12.1-torch2.1.2-py3.11-runtime"
UBUNTU_SLUG = "cuda11.8-torch2.1.2-py3.10-runtime"
DEBIAN_SOURCES = "/etc/apt/sources.list.d/debian.sources"


def test_the_mirror_step_treats_a_hostile_value_as_text(engine: None, tmp_path: Path) -> None:
    # Defence in depth: even a value that got past validation is only ever a quoted argument, never a command.
    output, sources = _mirror_step(
        tmp_path, DEBIAN_SLUG, {"APT_MIRROR": INJECTING_MIRROR, "PIP_INDEX_URL": "https://x/$(id)"}, DEBIAN_SOURCES
    )
    assert not _ran_the_value(output), output
    assert f"URIs: {INJECTING_MIRROR}\n" in sources


def test_the_mirror_step_points_debian_at_the_mirror(engine: None, tmp_path: Path) -> None:
    args = {"APT_MIRROR": "http://mirror.example.org/debian/", "APT_SECURITY_MIRROR": "http://sec.example.org/ds/"}
    _, sources = _mirror_step(tmp_path, DEBIAN_SLUG, args, DEBIAN_SOURCES)
    stanzas = [dict(line.split(": ", 1) for line in s.splitlines()) for s in sources.strip().split("\n\n")]
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert stanzas == [
        {"Types": "deb", "URIs": "http://mirror.example.org/debian", "Suites": "bookworm bookworm-updates",
         "Components": "main", "Signed-By": keyring},
        {"Types": "deb", "URIs": "http://sec.example.org/ds", "Suites": "bookworm-security",
         "Components": "main", "Signed-By": keyring},
    ]  # fmt: skip


def test_the_mirror_step_keeps_upstream_sources_without_a_mirror(engine: None, tmp_path: Path) -> None:
    _, sources = _mirror_step(tmp_path, DEBIAN_SLUG, {}, DEBIAN_SOURCES)
    base = RUNNER.docker("run", "--rm", "--network", "none", BASE, "cat", DEBIAN_SOURCES)
    assert base.ok and sources == base.out


def test_the_mirror_step_points_ubuntu_archive_and_security_at_the_mirror(engine: None, tmp_path: Path) -> None:
    _, sources = _mirror_step(
        tmp_path, UBUNTU_SLUG, {"APT_MIRROR": "http://mirror.example.org/ubuntu/"}, "/etc/apt/sources.list"
    )
    lines = [line.split() for line in sources.splitlines() if line.strip()]
    assert {line[1].rstrip("/") for line in lines} == {"http://mirror.example.org/ubuntu"}
    # Every suite and component the official image lists, now all from the mirror.
    wanted = {(w[2], c) for w in map(str.split, UBUNTU_SOURCES.splitlines()) for c in w[3:]}
    assert {(line[2], c) for line in lines for c in line[3:]} == wanted
