"""Load matrix.yaml into a frozen, validated model; every problem is reported at once with its key path."""

from __future__ import annotations

import re
from operator import eq, ge, gt, le, lt
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError, field_validator

from dlimages.core.errors import InputError, Problem, allowed_list
from dlimages.core.files import read_regular
from dlimages.core.grammar import VERSION
from dlimages.model.keypaths import problem_from_pydantic
from dlimages.model.matrixyaml import MAX_MATRIX_BYTES, load_yaml
from dlimages.model.sections import (
    ArchList,
    Axes,
    CudaToolkit,
    Framework,
    FrameworkName,
    ImageSpec,
    MirrorProfile,
    Model,
    Name,
    NvidiaCuda,
    OsSpec,
    Packages,
    Publisher,
    Version,
)

MATRIX_FILE = "matrix.yaml"


class Matrix(Model):
    schema_version: Annotated[int, Field(ge=1, le=1)]
    release: Annotated[str, Field(pattern=rf"^v{VERSION.pattern}$")]
    publisher: Publisher
    images: dict[FrameworkName, ImageSpec]
    axes: Axes
    flavors: dict[Name, str]
    cuda: dict[Version, CudaToolkit]
    os: dict[Name, OsSpec]
    nvidia_cuda: NvidiaCuda
    arch_lists: dict[str, ArchList] = Field(default_factory=dict)
    frameworks: dict[FrameworkName, Framework]
    partials: list[Name] = Field(min_length=1)
    packages: Packages
    mirrors: dict[Name, MirrorProfile]

    @field_validator("mirrors")
    @classmethod
    def _has_none_profile(cls, value: dict[str, MirrorProfile]) -> dict[str, MirrorProfile]:
        if "none" not in value:
            raise ValueError("a `none` profile (upstream defaults) is required; found " + ", ".join(value))
        return value


def parse_matrix(text: str, where_file: str = MATRIX_FILE) -> Matrix:
    """Parse and validate matrix text; raise InputError listing every problem."""
    if len(text) > MAX_MATRIX_BYTES:
        raise InputError(
            [Problem(where_file, f"too large: {len(text)} characters, over the limit of {MAX_MATRIX_BYTES} (1 MiB)")]
        )
    data = load_yaml(text, where_file)
    if not isinstance(data, dict):
        raise InputError([Problem(where_file, "must be a mapping of keys at the top level")])
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        raise InputError([problem_from_pydantic(e, where_file, Matrix) for e in exc.errors()]) from None
    problems = cross_check(matrix, where_file)
    if problems:
        raise InputError(problems)
    return matrix


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file: at most MAX_MATRIX_BYTES of UTF-8 text from a regular file."""
    try:
        raw = read_regular(path, MAX_MATRIX_BYTES)
    except OSError as exc:
        raise InputError([Problem(str(path), f"cannot read: {exc.strerror}")]) from None
    if len(raw) > MAX_MATRIX_BYTES:
        raise InputError([Problem(path.name, f"too large: over the limit of {MAX_MATRIX_BYTES} bytes (1 MiB)")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(
            [Problem(f"{path.name}:{line}", f"not UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8")]
        ) from None
    return parse_matrix(text, path.name)


def cross_check(m: Matrix, f: str) -> list[Problem]:
    """References between sections: each named CUDA, OS, flavor, release and package must exist."""
    problems: list[Problem] = []
    cudas, oses = list(m.cuda), list(m.os)
    pythons = sorted({spec.python for spec in m.os.values()}, key=version_key)
    for axis, values, known, said in (
        ("cuda", m.axes.cuda, cudas, "CUDA {} has no entry under `cuda:`"),
        ("python", m.axes.python, pythons, "no OS under `os:` provides Python {}"),
        ("flavor", m.axes.flavor, list(m.flavors), "flavor {!r} is not described under `flavors:`"),
    ):
        problems += [
            Problem(f"{f}: axes.{axis}[{i}]", said.format(value), allowed_list(known))
            for i, value in enumerate(values)
            if value not in known
        ]
    for key in set(m.images) ^ set(m.frameworks):
        section = "images" if key in m.images else "frameworks"
        problems.append(Problem(f"{f}: {section}.{key}", "every image needs a framework entry and vice versa"))
    for cuda, toolkit in m.cuda.items():
        if version_key(toolkit.compat_driver) > version_key(toolkit.min_driver):
            problems.append(
                Problem(
                    f'{f}: cuda."{cuda}".compat_driver',
                    f"{toolkit.compat_driver} is newer than min_driver {toolkit.min_driver}",
                    "a driver at most min_driver: the floor under minor-version compatibility, or min_driver itself",
                )
            )
    for cuda, images in m.nvidia_cuda.toolkits.items():
        at = f'{f}: nvidia_cuda.toolkits."{cuda}"'
        if cuda not in m.cuda:
            problems.append(Problem(at, f"unknown CUDA version {cuda}", allowed_list(cudas)))
        # The doctor knows a driver's CUDA version only relative to this entry's own (see compat.DriverRule).
        problems += [
            Problem(f"{at}.require_cuda", f"the condition {condition!r} is not about CUDA {cuda}", f"cuda>={cuda}")
            for condition in re.split(r"[ ,]", images.require_cuda or "")
            if condition.startswith("cuda") and condition != f"cuda>={cuda}"
        ]
        problems += [
            Problem(f"{at}.os[{i}]", f"unknown OS {os_name!r}", allowed_list(oses))
            for i, os_name in enumerate(images.os)
            if os_name not in m.os
        ]
    releases = {(fw.package, version) for fw in m.frameworks.values() for version in fw.releases}
    for name, framework in m.frameworks.items():
        for version, release in framework.releases.items():
            for cuda, variant in release.variants.items():
                where = f'{f}: frameworks.{name}.releases."{version}".variants."{cuda}"'
                if cuda not in m.cuda:
                    problems.append(Problem(where, f"unknown CUDA version {cuda}", allowed_list(cudas)))
                if variant.cuda_libs == "wheel" and name == "pytorch" and not (variant.index_url or variant.find_links):
                    problems.append(Problem(where, "a PyTorch CUDA variant needs `index_url` or `find_links`"))
                if variant.index_url and variant.find_links:
                    problems.append(Problem(where, "give either `index_url` or `find_links`, not both"))
    for key, pins in m.packages.overrides.items():
        axes = {("python", python) for python in m.axes.python}
        if not any(override_applies(key, package, version) for package, version in releases | axes):
            problems.append(
                Problem(
                    f"{f}: packages.overrides.{key}",
                    "names no framework release",
                    "a framework package or `python` with conditions that hold for one of its releases or Python "
                    "versions, e.g. tensorflow==2.4.0, torch>=2.5, tensorflow>=2.15,<2.18, python>=3.12; releases: "
                    + ", ".join(sorted(f"{p}=={v}" for p, v in releases)),
                )
            )
        for package in pins:
            if package not in m.packages.default:
                problems.append(
                    Problem(
                        f"{f}: packages.overrides.{key}.{package}",
                        "overrides a package the default set does not have",
                        allowed_list(m.packages.default),
                    )
                )
    for name, profile in m.mirrors.items():
        if name == "none" and (profile.apt or profile.pypi or profile.pytorch_wheels or profile.bases):
            problems.append(Problem(f"{f}: mirrors.none", "the `none` profile must not set any mirror"))
        if profile.pytorch_wheels and "{variant}" not in profile.pytorch_wheels:
            problems.append(
                Problem(f"{f}: mirrors.{name}.pytorch_wheels", "must contain the `{variant}` placeholder (e.g. cu118)")
            )
    return problems


_CONDITION = re.compile(r"(==|>=|<=|<|>)([0-9]+(?:\.[0-9]+)*)")
_COMPARE = {"==": eq, ">=": ge, "<=": le, "<": lt, ">": gt}


def override_applies(key: str, package: str, version: str) -> bool:
    """Whether a `packages.overrides` key (`PACKAGE` then comma-separated conditions: tensorflow==2.4.0,
    torch>=2.5, tensorflow>=2.15,<2.18) holds for this release; a key that is none of these holds for nothing."""
    conditions = key.removeprefix(package).split(",")
    matches = [_CONDITION.fullmatch(condition) for condition in conditions]
    if not key.startswith(package) or not all(matches):
        return False
    have = version_key(version)
    # == compares as far as the wanted version goes: tensorflow==2.4 holds for 2.4.0 and 2.4.4.
    return all(
        _COMPARE[m[1]](have[: len(version_key(m[2]))] if m[1] == "==" else have, version_key(m[2]))
        for m in matches
        if m is not None
    )


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def version_matches(full: str, wanted: str) -> bool:
    """Whether a release is the version asked for, where a partial version names its releases: 2.1 has 2.1.2."""
    return version_key(full)[: len(version_key(wanted))] == version_key(wanted)
