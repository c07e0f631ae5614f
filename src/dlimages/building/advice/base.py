"""A base image that cannot be pulled: which, from which registry, and the ways out (a profile's registry mirror, a
registry of one's own, a cell on the base made here)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from dlimages.building.advice.diagnosis import Attempt, Diagnosis, Remedies
from dlimages.building.advice.reading import Step, Trouble, either, reason, shorten
from dlimages.core import usage
from dlimages.core.references import names_registry, split_tag
from dlimages.model.cells import BASE, HUB, PYPI, Cell, need_words
from dlimages.model.selection import flags_for, nearest_without
from dlimages.model.spec import Matrix
from dlimages.payload.dl_stack import FRAMEWORKS

MIRROR_BASES = usage.BASES_MIRROR  # the task that copies every base into a team's own registry, once

_SOURCE_METADATA = re.compile(
    r"failed to solve: (?P<ref>\S+?): failed to resolve source metadata for \S+?: (?P<why>.*)$"
)
_FROM_STEP = re.compile(r"^\[(?:internal\] load metadata for|[^\]]*\] FROM) (?P<ref>\S+)")
_PULL_DENIED = re.compile(r"pull access denied for (?P<ref>[^,\s]+)")
_URL_HOST = re.compile(r"(?:https?)://(?P<host>[^/\s\"]+)")
_LOOKUP = re.compile(r"lookup (?P<host>\S+?)(?: on \S+)?: no such host")


def base_failure(step: Step, attempt: Attempt, remedies: Remedies) -> Diagnosis | None:
    ref = why = None
    for line in step.lines:
        if found := _SOURCE_METADATA.search(line):
            ref, why = found.group("ref"), found.group("why")
    if ref is None and (header := _FROM_STEP.match(step.header)):
        error = next((line for line in step.lines if line.startswith("ERROR:")), None)
        if error is not None:
            ref, why = header.group("ref"), error.removeprefix("ERROR:").strip()
    if ref is None and (denied := _PULL_DENIED.search(step.text)):
        ref, why = denied.group("ref"), denied.group(0)
    if ref is None or why is None:
        return None
    return base_not_pullable(ref, why, attempt, remedies)


def bases_unavailable(
    failed: Mapping[str, tuple[str, str]], matrix: Matrix, cells: Sequence[Cell], profile: str
) -> str:
    """The ways out for bases a build cannot pull (name -> its cell's slug and what the registry said), one `error:`
    paragraph each (`cells`: the matrix's cells, to offer one on the offline base)."""
    by_slug = {cell.slug: cell for cell in cells}
    remedies = Remedies.from_matrix(matrix, cells)
    said = [
        base_not_pullable(name, problem, Attempt(by_slug.get(slug), profile, base_image=name), remedies).advice
        for name, (slug, problem) in failed.items()
    ]
    return "\n".join(f"error: {text}" for text in said)


def base_not_pullable(ref: str, error: str, attempt: Attempt, remedies: Remedies) -> Diagnosis:
    """A base that cannot be pulled: which, from where (the registry the `error` names) and the three ways out: a
    profile's registry mirror, a registry of one's own (`invoke bases.mirror`, then --base-registry), a cell on the
    offline base. `ref` is the name that was pulled; `attempt.base_image` too, when it came through a mirror."""
    host = _base_host(ref, error)
    said, trouble = reason(error)
    lines = _base_advice(ref, host, said, trouble, attempt, remedies)
    return Diagnosis("base", f"base image not pullable ({host})", "\n".join(lines), host, ref, shorten(error))


def _base_host(ref: str, why: str) -> str:
    """The registry the engine asked, as its error names it: the URL it requested, the name it looked up, else the
    registry part of the reference (Docker Hub for a name without one)."""
    if found := _URL_HOST.search(why):
        return found.group("host")
    if found := _LOOKUP.search(why):
        return found.group("host")
    return ref.partition("/")[0] if names_registry(ref) else "docker.io"


def _name(ref: str) -> str:
    return ref.split("@", 1)[0]


def _base_registry(attempt: Attempt) -> str | None:
    """The registry prefix the build took its base through (--base-registry or a profile's `bases`), read off
    BASE_IMAGE: PREFIX/<the base's Docker Hub path>; None when it pulled the base by its own name."""
    if attempt.cell is None or attempt.base_image is None:
        return None
    pulled, base = _name(attempt.base_image), _name(attempt.cell.base_image)
    if pulled == base:
        return None
    hub_path = base if "/" in base else f"library/{base}"  # Docker Hub's path for an official image
    for path in dict.fromkeys((hub_path, base)):
        if pulled.endswith("/" + path):
            return pulled[: -len(path) - 1]
    return pulled.partition("/")[0] if names_registry(pulled) else None


Route = Literal["upstream", "profile", "own"]  # how the build asked for its base


def _base_advice(ref: str, host: str, said: str, trouble: Trouble, attempt: Attempt, remedies: Remedies) -> list[str]:
    cell = attempt.cell
    prefix = _base_registry(attempt)
    mirrors = {name: (registry, limits) for name, registry, limits in remedies.base_mirrors}
    route: Route = (
        "upstream" if prefix is None else "profile" if mirrors.get(attempt.profile, ("",))[0] == prefix else "own"
    )
    base = cell.base_image if cell is not None else ref
    if route == "own":
        lines = [
            f"The base image {base} cannot be pulled from the registry at {host} (--base-registry {prefix}), "
            f"as {ref}: {said}."
        ]
    elif route == "profile":
        lines = [
            f"The base image {base} cannot be pulled through mirror profile {attempt.profile}'s registry "
            f"mirror {prefix}, as {ref}: {host}: {said}."
        ]
    else:
        lines = [f"The base image {ref} cannot be pulled from {host}: {said}."]
    ways = [
        _own_registry_way(route, prefix, host, trouble, ref),
        _profile_way(route, remedies, attempt, prefix, host, trouble),
        _offline_way(route, remedies, cell),
    ]
    if cell is not None and cell.bootstrap_base and route != "own":
        ways.insert(0, ways.pop())  # its base is made here: that is the way out, not a registry
    elif route != "own":
        ways.insert(0, ways.pop(1))  # a (another) profile is the quickest
    return [*lines, "Ways out:", *(f"  - {way}" for way in ways)]


def _own_registry_way(route: Route, prefix: str | None, host: str, trouble: Trouble, ref: str) -> str:
    """A registry of one's own: how to fill it, or what is wrong with the one the build used."""
    if route != "own" or prefix is None:
        return (
            f"a registry of your own: `{MIRROR_BASES} --to HOST[/PREFIX]` once, where upstream is reachable (it "
            "copies every base there), then build with --base-registry HOST[/PREFIX]"
        )
    registry = prefix.split("/", 1)[0]
    copy = f"`{MIRROR_BASES} --to {prefix}` copies every base there (once, where upstream is reachable)"
    if trouble == "missing":
        return f"the registry at {host} has no {ref}: {copy}"
    if trouble == "auth":
        return f"the registry at {host} wants credentials: `docker login {registry}`; if it lacks the bases, {copy}"
    if trouble == "tls":
        return (
            f"the engine does not trust {host}'s certificate: put its CA in /etc/docker/certs.d/{registry}/ca.crt; "
            f"if it lacks the bases, {copy}"
        )
    if trouble == "http":
        return f"{host} serves plain HTTP: add it to dockerd's insecure-registries; if it lacks the bases, {copy}"
    return (
        f"check that the registry at {host} runs and that this machine reaches it; then, if it lacks the bases, {copy}"
    )


def _profile_way(
    route: Route, remedies: Remedies, attempt: Attempt, prefix: str | None, host: str, trouble: Trouble
) -> str:
    """A mirror profile that takes the bases through a registry mirror (another one, when the build used one)."""
    said = "a mirror profile that takes the bases through a registry mirror"
    names = [name for name, _, _ in remedies.base_mirrors]
    if not names:
        way = f"{said}: --mirror NAME, a profile with `bases` in matrix.yaml's `mirrors:`"
    elif route == "profile":
        limits = next((limits for name, _, limits in remedies.base_mirrors if name == attempt.profile), "")
        others = [name for name, registry, _ in remedies.base_mirrors if registry != prefix]
        way = f"this build used {attempt.profile}'s registry mirror {host}"
        if limits and trouble in ("missing", "auth", "rate"):
            way += f" ({limits})"
        way += f"; another: --mirror {either(others)}" if others else " (every profile with bases uses it)"
    else:
        only = f" ({', '.join(remedies.bases_only)} changes only the bases)" if remedies.bases_only else ""
        way = f"{said}: --mirror {either(names)}{only}"
        if attempt.cell is not None and attempt.cell.bootstrap_base:
            pulled = ", ".join(
                dict.fromkeys(split_tag(_name(c.base_image))[0] for c in remedies.cells if not c.bootstrap_base)
            )
            way = (
                f"cells on registry bases ({pulled or 'ubuntu, nvidia/cuda'}) can take them through a mirror profile's "
                f"registry mirror: --mirror {either(names)}{only}; this cell's base is made here, never pulled"
            )
        elif route == "own":
            way += ", without --base-registry"
    return way


def _offline_way(route: Route, remedies: Remedies, cell: Cell | None) -> str:
    """A cell on the offline base, which needs no registry at all."""
    said = f"the offline base, which `{usage.BASE}` makes here from an apt mirror with no registry"
    if cell is not None and cell.bootstrap_base:
        without = " without --base-registry" if route == "own" else ""
        return f"{said}: this cell is on it; run `{usage.BASE}`, then `{usage.BUILD} {flags_for(cell)}`{without}"
    offline = offline_cell(remedies.cells, cell)
    if offline is not None:
        way = f"a cell on {said}: `{usage.BUILD} {flags_for(offline)}`"
        if not (also := also_needs(offline, BASE)):
            return way
        plain = offline_cell(remedies.cells, cell, pypi_only=True)  # the nearest that needs nothing else
        return way + also + (f"; from PyPI alone: `{usage.BUILD} {flags_for(plain)}`" if plain else "")
    if remedies.cells:
        framework = FRAMEWORKS[cell.framework].title if cell is not None else "this framework"
        where = "an OS with `bootstrap: true`, CUDA from wheels"
        return f"{said}: no {framework} cell of matrix.yaml builds on it (one on {where})"
    return f"a cell on {said} (`{usage.MATRIX}` lists them: Python 3.11)"


def offline_cell(cells: Sequence[Cell], like: Cell | None = None, *, pypi_only: bool = False) -> Cell | None:
    """A cell on the base made here (`invoke base`), which builds without the registry `like`'s base failed on: of
    `like`'s framework and release where there is one, else the nearest release; then the nearest CUDA, Python
    (model.selection.nearest_without). Without `like`: the newest of the first framework the matrix lists.
    `pypi_only`: one whose Python packages all come from PyPI too (no framework index)."""
    failed = like.needs[0] if like is not None else HUB

    def offline(cell: Cell) -> bool:
        return cell.bootstrap_base and (not pypi_only or set(cell.needs) <= {BASE, PYPI})

    return nearest_without(cells, failed, like, only=offline)


def also_needs(cell: Cell, *spared: str) -> str:
    """What else a proposed cell's build needs, past `spared` and PyPI: " (it needs PyTorch's index too)"."""
    others = [need_words(need) for need in cell.needs if need not in (*spared, PYPI)]
    return f" (it needs {' and '.join(others)} too)" if others else ""
