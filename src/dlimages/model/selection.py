"""Choose cells from command-line flags; when nothing matches, say why and offer the nearest valid cells."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from dlimages.core.errors import InputError, Problem, allowed_list
from dlimages.core.grammar import version_problem
from dlimages.model.cells import Cell, Expansion
from dlimages.model.compat import Candidate
from dlimages.model.spec import Matrix, version_key, version_matches
from dlimages.payload.dl_stack import FRAMEWORKS


@dataclass(frozen=True)
class Selection:
    """What the user asked for on the command line; None means "not given"."""

    cuda: str | None = None
    framework: str | None = None
    version: str | None = None
    python: str | None = None
    flavor: str | None = None

    @classmethod
    def from_flags(
        cls, cuda: str | None, torch: str | None, tf: str | None, python: str | None, flavor: str | None
    ) -> Selection:
        """The selection `invoke build --cuda --torch/--tf --python --flavor` asks for; one framework at most.

        A flag given with an empty value is refused: read as "not given", it would select every cell.
        """
        given = {
            "--cuda": (cuda, "a version such as 11.8"),
            "--torch": (torch, "a version such as 2.1"),
            "--tf": (tf, "a version such as 2.14"),
            "--python": (python, "a version such as 3.10"),
            "--flavor": (flavor, "runtime or devel"),
        }
        problems = [
            Problem(flag, "is empty", f"{example}, or leave {flag} out")
            for flag, (value, example) in given.items()
            if value is not None and not value.strip()
        ]
        if torch is not None and tf is not None:
            problems.append(Problem("--torch/--tf", "choose one framework per build", "--torch X or --tf Y"))
        if problems:
            raise InputError(problems)
        framework = "pytorch" if torch is not None else "tensorflow" if tf is not None else None
        return cls(cuda=cuda, framework=framework, version=torch if tf is None else tf, python=python, flavor=flavor)

    def matches(self, point: Candidate) -> bool:
        """Whether a valid cell's or an excluded combination's axis values are the ones asked for."""
        return point.matches(**asdict(self))


def select(matrix: Matrix, expansion: Expansion, want: Selection, *, defaults: bool = True) -> list[Cell]:
    """The cells matching the flags, or InputError naming the bad flag and what is allowed.

    A partial version picks the newest matching patch release. With `defaults`, a missing --python or
    --flavor picks the image default's value where the selection has it, else the newest Python.
    """
    _check_flags(matrix, want)
    cells = [c for c in expansion.cells if want.matches(c.candidate)]
    if want.version is not None:
        newest = {c.framework: version_key(c.framework_version) for c in sorted(cells, key=_newest)}
        cells = [c for c in cells if version_key(c.framework_version) == newest[c.framework]]
    if defaults:
        cells = _apply_defaults(matrix, cells, want)
    if not cells:
        raise InputError([_impossible(matrix, expansion, want)])
    return cells


def _apply_defaults(matrix: Matrix, cells: list[Cell], want: Selection) -> list[Cell]:
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.framework, cell.framework_version, cell.cuda), []).append(cell)
    chosen: list[Cell] = []
    for (framework, _, _), group in groups.items():
        default = matrix.images[framework].default
        if want.flavor is None:
            flavors = {c.flavor for c in group}
            flavor = default.flavor if default.flavor in flavors else sorted(flavors)[0]
            group = [c for c in group if c.flavor == flavor]
        if want.python is None:
            pythons = {c.python for c in group}
            python = default.python if default.python in pythons else max(pythons, key=version_key)
            group = [c for c in group if c.python == python]
        chosen += group
    order = {id(c): i for i, c in enumerate(cells)}
    return sorted(chosen, key=lambda c: order[id(c)])


def _check_flags(matrix: Matrix, want: Selection) -> None:
    problems: list[Problem] = []
    if want.cuda is not None and want.cuda not in matrix.axes.cuda:
        problems.append(Problem("--cuda", f"unknown CUDA version {want.cuda!r}", allowed_list(matrix.axes.cuda)))
    if want.python is not None and want.python not in matrix.axes.python:
        problems.append(
            Problem("--python", f"unknown Python version {want.python!r}", allowed_list(matrix.axes.python))
        )
    if want.flavor is not None and want.flavor not in matrix.axes.flavor:
        problems.append(Problem("--flavor", f"unknown flavor {want.flavor!r}", allowed_list(matrix.axes.flavor)))
    if want.version is not None:
        frameworks = [want.framework] if want.framework else list(matrix.frameworks)
        known = [v for fw in frameworks for v in matrix.frameworks[fw].releases]
        flag = f"--{FRAMEWORKS[want.framework].flag}" if want.framework else "--version"
        if version_problem(want.version) is not None:
            problems.append(Problem(flag, f"{want.version!r} is not a version", f"e.g. {known[-1]}"))
        elif not any(version_matches(v, want.version) for v in known):
            problems.append(Problem(flag, f"no release matches {want.version!r}", allowed_list(known)))
    if problems:
        raise InputError(problems)


def _impossible(matrix: Matrix, expansion: Expansion, want: Selection) -> Problem:
    """Explain why nothing matched, and offer the nearest valid cells."""
    reasons: list[str] = []
    for ex in expansion.excluded:
        if want.matches(ex.candidate):
            # Without --cuda, "not published for CUDA X" says nothing: other CUDA versions were tried too.
            reasons += [str(r) for r in ex.reasons if want.cuda is not None or r.rule != "cuda-build"]
    unique = list(dict.fromkeys(reasons))
    preferred = {fw: image.default.python for fw, image in matrix.images.items()}
    nearest = nearest_cells(expansion.cells, want, preferred)
    message = "no valid cell matches this selection"
    if unique:
        message += ": " + "; ".join(unique[:4])
    if nearest:
        message += ". Nearest valid: " + "; ".join(flags_for(c) for c in nearest)
    return Problem(flags_text(want), message)


def nearest_cells(cells: Sequence[Cell], want: Selection, preferred: dict[str, str]) -> list[Cell]:
    """The three valid cells differing from the request in the fewest given flags, then by version distance,
    then preferring the image's default Python (`preferred`: by framework), one per framework release and CUDA."""

    def distance(cell: Cell) -> tuple[int, float, bool]:
        axes = ((want.cuda, cell.cuda), (want.python, cell.python), (want.flavor, cell.flavor))
        misses = sum(1 for given, actual in axes if given is not None and given != actual)
        if want.framework is not None and cell.framework != want.framework:
            misses += 10
        version_gap = 0.0
        if want.version is not None:
            misses += 0 if version_matches(cell.framework_version, want.version) else 1
            a, b = version_key(cell.framework_version), version_key(want.version)
            version_gap = abs((a[0] * 100 + (a[1] if len(a) > 1 else 0)) - (b[0] * 100 + (b[1] if len(b) > 1 else 0)))
        return misses, version_gap, cell.python != preferred.get(cell.framework)

    nearest: dict[str, Cell] = {}
    for cell in sorted(cells, key=distance):
        nearest.setdefault(f"{cell.framework}{cell.framework_version}{cell.cuda}", cell)
    return list(nearest.values())[:3]


def nearest_without(
    cells: Sequence[Cell], need: str, like: Cell | None = None, *, only: Callable[[Cell], bool] | None = None
) -> Cell | None:
    """The cell to propose after a build of `like` failed on `need` (a `Cell.needs` word: the source that failed):
    one of its framework whose build does not need that source (and that `only` keeps); of its release where there
    is one, else of the nearest release (the newer of two as near); then the nearest CUDA, then Python, then its
    flavor. Without `like`: the newest of the first framework. None when no such cell exists."""
    kept = [cell for cell in cells if only is None or only(cell)]
    framework = like.framework if like is not None else next((cell.framework for cell in kept), None)
    same = [cell for cell in cells if cell.framework == framework]
    spare = [cell for cell in kept if cell.framework == framework and need not in cell.needs]
    if like is None:
        return max(spare, key=_newest, default=None)
    releases = _ranks(cell.framework_version for cell in [*same, like])
    cudas = _ranks(cell.cuda for cell in [*cells, like])
    pythons = _ranks(cell.python for cell in [*cells, like])

    def distance(cell: Cell) -> tuple[int, int, int, bool, int, int, int]:
        release, cuda, python = releases[cell.framework_version], cudas[cell.cuda], pythons[cell.python]
        near = (abs(release - releases[like.framework_version]), abs(cuda - cudas[like.cuda]))
        return (*near, abs(python - pythons[like.python]), cell.flavor != like.flavor, -release, -cuda, -python)

    return min(spare, key=distance, default=None)


def _newest(cell: Cell) -> tuple[tuple[int, ...], ...]:
    return version_key(cell.framework_version), version_key(cell.python), version_key(cell.cuda)


def _ranks(versions: Iterable[str]) -> dict[str, int]:
    """Each version's place among them, oldest first: the distance between two releases, CUDAs or Pythons."""
    return {version: rank for rank, version in enumerate(sorted(set(versions), key=version_key))}


def flags_for(cell: Cell) -> str:
    """The `invoke build` flags that select exactly this cell."""
    return (
        f"--cuda {cell.cuda} --{FRAMEWORKS[cell.framework].flag} {cell.framework_version} "
        f"--python {cell.python} --flavor {cell.flavor}"
    )


def flags_text(want: Selection) -> str:
    """A selection as the flags that asked for it, for error messages."""
    framework = f"--{FRAMEWORKS[want.framework].flag}" if want.framework else ""
    parts = (
        f"--cuda {want.cuda}" if want.cuda else "",
        f"{framework} {want.version}".strip() if want.version else framework,
        f"--python {want.python}" if want.python else "",
        f"--flavor {want.flavor}" if want.flavor else "",
    )
    return " ".join(part for part in parts if part) or "(no flags)"
