"""The proof of reproducibility (`invoke repro`): build the same source twice from empty caches, or once against an
image built before (a local one, or a published one pulled by its digest), and compare the two images down to the
file (layerdiff.py).

A build from a tree with uncommitted changes is never called reproducible: the commit alone cannot rebuild it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import CONTAINERD, EXPORT, Built, config_digest, image_store
from dlimages.core.references import image_problems, registry_of
from dlimages.core.runner import Runner
from dlimages.core.watch import Wait
from dlimages.repro.comparison import ImageComparison
from dlimages.repro.layerdiff import CompareError, compare_images

# Empty caches: no layer is reused (--no-cache) and pip's download cache (a BuildKit cache mount) is emptied too.
PRUNE_CACHE_MOUNTS = ["docker", "builder", "prune", "--force", "--filter", "type=exec.cachemount"]
PRUNE_TIMEOUT_S = 300.0
DOCKERFILE_EPOCH = 1700000000  # 2023-11-14T22:13:20Z: any fixed time will do for a Dockerfile outside the matrix
PULL_TIMEOUT_S = 3600.0  # a published cell is gigabytes
AGAINST_ALLOWED = "a local image (e.g. lab/x:v1), or a published one by digest: REGISTRY/IMAGE@sha256:<64 hex>"
# What a failed `docker pull` says (its last line, lowercased) and what that means for the person who gave the ref.
PULL_FAILURES = (
    (("manifest unknown", "not found"), "the registry has no image under that digest"),
    (("unauthorized", "denied", "no basic auth"), "the registry refused access (`docker login REGISTRY` first?)"),
    (("connection refused", "no such host", "timeout", "dial tcp", "network is unreachable"), "registry unreachable"),
)


@dataclass(frozen=True)
class Outcome:
    """What `invoke repro` found for one build: the two image IDs and, when they differ, what differs."""

    name: str
    first: str | None
    second: str | None
    comparison: ImageComparison | None = None
    problem: str = ""  # a build or the comparison failed
    seconds: tuple[float, ...] = ()
    dirty: bool = False
    against: str | None = None  # the first image was given, not built (a local image, or REF@sha256:... pulled)

    @property
    def reproducible(self) -> bool:
        return not self.problem and self.comparison is not None and self.comparison.identical and not self.dirty

    def report(self) -> str:
        lines = [f"{self.name}:"]
        builds = list(self.seconds)
        if self.against is not None:
            lines.append(f"  given: {self.first or 'missing'} ({self.against})")
            if self.first and digest(self.against):
                lines.append(f"  verified against digest {digest(self.against)}")
        for number, image in enumerate([self.second] if self.against else [self.first, self.second], start=1):
            if builds:
                lines.append(f"  cold build {number}: {image or 'failed'} ({builds.pop(0):.0f} s)")
        if self.problem:
            lines.append(f"  NOT SHOWN REPRODUCIBLE: {self.problem}")
        elif self.comparison is not None and self.comparison.identical:
            lines.append("  identical: the same config digest (the config and every layer's content, byte for byte)")
        elif self.comparison is not None:
            lines.append("  DIFFERENT:")
            lines += [f"    {line}" for line in self.comparison.format().splitlines()]
        if self.dirty:
            lines.append(
                "  NOT REPRODUCIBLE from a commit: the tree has uncommitted changes (the label says -dirty); "
                "commit them and run again"
            )
        return "\n".join(lines)


def cold(build: Sequence[str], metadata_file: Path) -> list[str]:
    """A `docker buildx build` argv with no cache and its own metadata file (a repro build never tags anything)."""
    argv = [word for word in build if word != "--no-cache"]
    for flag in ("--iidfile", "--metadata-file"):
        if flag in argv:
            del argv[argv.index(flag) : argv.index(flag) + 2]
    argv[-1:-1] = ["--metadata-file", str(metadata_file)]
    argv.insert(argv.index("build") + 1, "--no-cache")
    return argv


def dockerfile_build(dockerfile: Path, context: Path, epoch: int) -> list[str]:
    """The build `invoke repro --dockerfile` checks: any Dockerfile, with the same reproducibility settings as a
    cell's build (SOURCE_DATE_EPOCH, no attestations)."""
    return [
        "docker", "buildx", "build", "--progress=plain", EXPORT, "--provenance=false", "--sbom=false",
        "--file", str(dockerfile), "--build-arg", f"SOURCE_DATE_EPOCH={epoch}", str(context),
    ]  # fmt: skip


def flag_problems(
    dockerfile: str | None, context: str | None, against: str | None, cell_flags: Mapping[str, str | None]
) -> list[Problem]:
    """What `invoke repro`'s flags cannot mean together: `cell_flags` (flag -> value, None when not given) choose
    and shape a cell's build, which --dockerfile replaces with a build of that file, so they would be ignored;
    --context is the context of --dockerfile only; --against names one image (a tag-only one must be local: see
    `against_problems`). Checked before any engine."""
    against_refs = [against] if against is not None else []
    problems = [replace(each, allowed=AGAINST_ALLOWED) for each in image_problems(against_refs, "--against")]
    given = [flag for flag, value in cell_flags.items() if value is not None]
    if dockerfile is not None and given:
        problems.append(
            Problem(
                "--dockerfile",
                f"cannot be combined with {', '.join(given)}: those build a cell of the matrix, --dockerfile builds "
                "the file given instead",
                "--dockerfile [--context] [--against], or the cell flags without --dockerfile",
            )
        )
    if dockerfile is None and context is not None:
        problems.append(Problem("--context", "only with --dockerfile (a cell is built from the repository)"))
    return problems


def dockerfile_flags(dockerfile: str, context: str | None) -> tuple[Path, Path, int]:
    """--dockerfile/--context checked (InputError otherwise), with a fixed SOURCE_DATE_EPOCH: the Dockerfile's own
    time would differ between checkouts."""
    path = Path(dockerfile)
    folder = Path(context) if context is not None else path.parent
    problems = []
    if not path.is_file():
        problems.append(Problem("--dockerfile", f"no such file: {dockerfile}", "a Dockerfile"))
    if not folder.is_dir():
        problems.append(Problem("--context", f"no such folder: {folder}", "the build context folder"))
    if problems:
        raise InputError(problems)
    return path.absolute(), folder.absolute(), DOCKERFILE_EPOCH


def digest(ref: str) -> str | None:
    """The sha256:... a checked reference pins (repository[:tag]@sha256:...), or None."""
    _, at, pinned = ref.rpartition("@")
    return pinned if at else None


def against_problems(against: str | None, runner: Runner) -> list[Problem]:
    """An --against without a digest must be a local image: a tag is never pulled, it may name another image by now.
    Asks the engine, so it runs once one answers, before any build."""
    if against is None or digest(against) or runner.image_exists(against):
        return []
    return [Problem(f"--against {against!r}", "is no local image and pins no digest to pull", AGAINST_ALLOWED)]


def given_image(against: str, runner: Runner) -> tuple[str | None, str]:
    """The local ID of the image `against` names (pulled by its digest when the engine lacks it), or None and why
    not."""
    known = runner.image_id(against)
    if known is None and digest(against):
        pulled = runner.watched(
            ["docker", "pull", against], Wait(f"pulling {against}", registry_of(against), PULL_TIMEOUT_S)
        )
        if not pulled.ok:
            said = pulled.last_line.lower()
            meaning = next((why for needles, why in PULL_FAILURES if any(n in said for n in needles)), "pull failed")
            return None, f"could not pull {against}: {meaning} ({pulled.last_line})"
        known = runner.image_id(against)
        if known is None:
            return None, f"pulled {against}, but the engine does not know it by that reference"
    if known is None:
        return None, f"no local image {against!r} to compare with"
    return known, ""


def build_cold(
    build: Sequence[str], metadata_file: Path, root: Path, runner: Runner, on_line: Callable[[str], None]
) -> tuple[Built | None, float, str]:
    """One cold build: (what it built or None, seconds, why it failed)."""
    prune = runner(PRUNE_CACHE_MOUNTS, timeout=PRUNE_TIMEOUT_S)
    if not prune.ok:
        return None, 0.0, f"could not empty the build cache: {prune.last_line}"
    argv = cold(build, metadata_file)
    metadata_file.parent.mkdir(parents=True, exist_ok=True)
    metadata_file.unlink(missing_ok=True)
    tail: list[str] = []

    def show(line: str) -> None:
        on_line(line)
        tail[:] = [*tail[-19:], line]

    start = time.monotonic()
    code = runner.stream(argv, show, cwd=root)
    seconds = time.monotonic() - start
    built = Built.read(metadata_file) if code == 0 else None
    if built is None:
        last = next((line.strip() for line in reversed(tail) if line.strip()), "no output")
        return None, seconds, f"the build failed (exit {code}): {last[:300]}"
    return built, seconds, ""


def reproduce(
    name: str,
    build: Sequence[str],
    root: Path,
    runner: Runner,
    workdir: Path,
    *,
    against: str | None = None,
    dirty: bool = False,
    on_line: Callable[[str], None] = print,
    compare: Callable[[str, str], ImageComparison] | None = None,
) -> Outcome:
    """Run the `build` argv cold twice (or once, compared with the image `against` names, pulled by its digest when
    not local); compare the results. Identical means the same config digest (core.imagestore: on the containerd
    store two builds may be stored with other compressed layers, and so under other manifest digests)."""
    seconds: list[float] = []
    images: list[Built] = []
    store = image_store(runner)
    given_id = None
    if against is not None:
        given_id, problem = given_image(against, runner)
        if given_id is None:
            return Outcome(name, None, None, problem=problem, against=against)
    while len(images) < (1 if against is not None else 2):
        metadata = workdir / f"repro-{len(images) + 1}.json"
        image, took, problem = build_cold(build, metadata, root, runner, on_line)
        seconds.append(took)
        if image is None:
            # Two builds at most: a failed one leaves one image before it, or none.
            built = given_id if against is not None else images[0].config if images else None
            return Outcome(name, built, None, problem=problem, seconds=tuple(seconds), dirty=dirty, against=against)
        images.append(image)
    if against is not None:
        # Read after the build: a cold build stored as the given image was is known by the same manifest.
        config = config_digest(against, runner, store, built=images[0])
        if config is None:
            problem = f"could not read the config digest of {against}"
            return Outcome(name, None, images[0].config, problem=problem, seconds=tuple(seconds), against=against)
        images.insert(0, Built(config, given_id if store == CONTAINERD else None))
    first, second = images
    compare = compare or (lambda a, b: compare_images(a, b, runner=runner))
    try:
        if first.config == second.config:
            comparison = ImageComparison(first.config, second.config, (), ())
        else:
            comparison = compare(first.local_id(store), second.local_id(store))
    except CompareError as error:
        return Outcome(
            name, first.config, second.config, problem=str(error), seconds=tuple(seconds), dirty=dirty, against=against
        )
    return Outcome(name, first.config, second.config, comparison, seconds=tuple(seconds), dirty=dirty, against=against)
