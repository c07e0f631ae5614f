"""`invoke bake` and `invoke build --jobs 2` against the real engine, from a git clone: the two CI cells
(ci_plan.BUILDS) built through bake get the very tags and labels `invoke build` gives them, and, the builds being
reproducible (same commit, so the same SOURCE_DATE_EPOCH and REVISION), the very image IDs.

Needs the engine with buildx, the base `dlimages/base:debian12` and both CI cells' images (CI builds them first, so
every step comes from the build cache). The cells' tags are put back on the images they named before the test, and
images the test made are removed. DLIMAGES_NO_DOCKER=1 skips.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import require_engine

from dlimages.building.bake import target_name
from dlimages.building.builder import run_builds
from dlimages.building.plan import BuildPlan, Secrets, plan_run
from dlimages.commands.ci_plan import BUILDS
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.generate.project import Project
from dlimages.model.cells import Cell
from dlimages.model.selection import Selection, select

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BASE = "dlimages/base:debian12"


def invoke(root: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=root,
    )


Built = tuple[dict[str, str | None], dict[str, str]]  # a cell's tags -> image IDs, and its labels


def flags_of(line: str) -> dict[str, str]:
    words = shlex.split(line)
    return {words[i].removeprefix("--"): words[i + 1] for i in range(0, len(words), 2)}


def ci_cell(project: Project, line: str) -> Cell:
    flags = flags_of(line)
    want = Selection.from_flags(flags.get("cuda"), flags.get("torch"), flags.get("tf"), flags.get("python"), None)
    [cell] = select(project.matrix, project.expansion, want)
    return cell


def labels(ref: str) -> dict[str, str]:
    done = RUNNER.docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref)
    assert done.ok, done.err
    found: dict[str, str] = json.loads(done.out)
    return found


def tagged(cell: Cell) -> dict[str, str | None]:
    return {ref: RUNNER.image_id(ref) for ref in cell.refs}


@pytest.fixture(scope="module")
def cells() -> dict[str, Cell]:
    """The CI cells by their `invoke build` flags; the engine, the base and both images must be there."""
    require_engine()
    project = Project(REPO)
    found = {line: ci_cell(project, line) for line in BUILDS}
    for image in (BASE, *(cell.refs[0] for cell in found.values())):
        if not RUNNER.image_exists(image):
            pytest.fail(f"{image} is missing: `invoke ci` builds the CI cells first", pytrace=False)
    return found


@pytest.fixture(scope="module")
def clone(cells: dict[str, Cell], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of this commit to build in: a clean tree, so REVISION is the commit, as in CI."""
    path = tmp_path_factory.mktemp("clone") / "repo"
    done = RUNNER(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(path)], timeout=120)
    assert done.ok, done.err
    return path


@pytest.fixture(scope="module")
def tags_kept(cells: dict[str, Cell]) -> Iterator[None]:
    """The cells' tags go back on the images they named; an image the test made is removed."""
    before = {ref: image_id for cell in cells.values() for ref, image_id in tagged(cell).items()}
    made: set[str] = set()
    yield
    for cell in cells.values():
        made |= {image_id for image_id in tagged(cell).values() if image_id}
    for ref, image_id in before.items():
        if image_id is not None:
            RUNNER.docker("tag", image_id, ref)
    for image_id in made - set(before.values()):
        RUNNER.docker("image", "rm", "--no-prune", image_id)


@pytest.fixture(scope="module")
def sequential(cells: dict[str, Cell], clone: Path, tags_kept: None) -> dict[str, Built]:
    """What `invoke build` gives each CI cell from the clone: its tags' image IDs and its labels."""
    found: dict[str, Built] = {}
    for line, cell in cells.items():
        done = invoke(clone, "build", *shlex.split(line), "--no-engine-setup")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        found[line] = (tagged(cell), labels(cell.refs[0]))
    return found


@pytest.mark.parametrize("line", BUILDS)
def test_bake_file_holds_the_build_the_dry_run_shows(cells: dict[str, Cell], clone: Path, line: str) -> None:
    cell = cells[line]
    out = clone / ".work" / f"{cell.slug}.json"
    done = invoke(clone, "bake", *shlex.split(line), "--out", str(out))
    assert done.returncode == 0, done.stderr
    dry = invoke(clone, "build", *shlex.split(line), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    argv = shlex.split(next(row for row in dry.stdout.splitlines() if row.startswith("docker buildx build")))
    args = dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "--build-arg")
    secrets = [argv[i + 1] for i, word in enumerate(argv) if word == "--secret"]

    document = json.loads(out.read_text())
    [(name, body)] = document["target"].items()
    assert name == cell.slug.replace(".", "_")
    assert body["args"] == args and body["secret"] == secrets
    assert body["tags"] == list(cell.refs)
    assert body["attest"] == ["type=provenance,disabled=true", "type=sbom,disabled=true"]
    # buildx itself reads the file (run from the clone's root, where its relative paths point)
    printed = RUNNER(["docker", "buildx", "bake", "--file", str(out), "--print"], cwd=clone)
    assert printed.ok, printed.err
    assert json.loads(printed.out)["target"][name]["args"] == args


def test_jobs_2_gives_what_build_gives(cells: dict[str, Cell], clone: Path, sequential: dict[str, Built]) -> None:
    for line, cell in cells.items():
        done = invoke(clone, "build", *shlex.split(line), "--jobs", "2", "--no-engine-setup")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "ok" in done.stdout and cell.slug in done.stdout  # the summary table
        ids, want_labels = sequential[line]
        assert tagged(cell) == ids  # every tag, on the same image ID: the build is reproducible
        assert labels(cell.refs[0]) == want_labels


def test_both_ci_cells_in_one_bake_give_what_build_gives(
    cells: dict[str, Cell], clone: Path, sequential: dict[str, Built], tmp_path: Path
) -> None:
    project = Project(clone)
    plans: list[BuildPlan] = []
    secrets = Secrets.from_flags(None, None)
    for line, cell in cells.items():
        mirror = flags_of(line)["mirror"]
        plans += plan_run(clone, project.matrix, [cell], mirror, secrets, RUNNER, workdir=tmp_path)
    assert len({target_name(plan) for plan in plans}) == 2
    results = run_builds(plans, clone, workdir=tmp_path, bake_jobs=2, keep_going=False, out=io.StringIO())
    assert [result.ok for result in results] == [True, True], [result.error for result in results]
    for result, (line, cell) in zip(results, cells.items(), strict=True):
        ids, want_labels = sequential[line]
        assert result.cell == cell and set(ids.values()) == {result.image_id}
        assert tagged(cell) == ids
        assert labels(cell.refs[0]) == want_labels
