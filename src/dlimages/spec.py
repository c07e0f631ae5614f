"""Load matrix.yaml into a frozen, validated model; every problem is reported at once with its key path."""

from __future__ import annotations

import re
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlimages.errors import InputError, Problem, allowed_list
from dlimages.payload.dl_stack import FRAMEWORKS

MATRIX_FILE = "matrix.yaml"

Version = Annotated[str, Field(pattern=r"^\d+(\.\d+)*$")]
Driver = Annotated[str, Field(pattern=r"^\d+\.\d+(\.\d+)?$")]
Arch = Annotated[str, Field(pattern=r"^sm_\d{2,3}$")]
Url = Annotated[str, Field(pattern=r"^https?://\S+$")]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class Model(BaseModel):
    # A misspelled key is an error, never silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class CellRef(Model):
    """Axis values naming one cell; `version` may be partial (2.1 means the newest 2.1.x)."""

    cuda: Version
    version: Version
    python: Version
    flavor: Name


Tag = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")]


class Alias(CellRef):
    """An extra moving tag for one cell."""

    tag: Tag


class ImageSpec(Model):
    name: Annotated[str, Field(pattern=r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")]
    # The cell that the bare release tag (e.g. `v1.0`) points at.
    default: CellRef
    aliases: list[Alias] = Field(default_factory=list)


class Axes(Model):
    cuda: list[Version] = Field(min_length=1)
    python: list[Version] = Field(min_length=1)
    flavor: list[Name] = Field(min_length=1)


class CudaToolkit(Model):
    toolkit: Version
    min_driver: Driver
    compat_driver: Driver
    gpu_archs: list[Arch] = Field(min_length=1)
    source: Url


class OsSpec(Model):
    family: Literal["ubuntu", "debian"]
    codename: Name
    python: Version
    image: str
    bootstrap: bool = False
    source: Url


class NvidiaToolkitImages(Model):
    os: list[Name] = Field(min_length=1)
    cudnn: Version


class NvidiaCuda(Model):
    repository: str
    source: Url
    toolkits: dict[Version, NvidiaToolkitImages]


class ArchList(Model):
    sass: list[Arch]
    ptx: list[Arch]


class Variant(Model):
    """One published CUDA build of a framework release."""

    cudnn: Version
    cuda_libs: Literal["wheel", "system"]
    arch: ArchList
    local_version: str | None = Field(default=None, pattern=r"^\+[a-z0-9]+$")
    index_url: Url | None = None
    find_links: Url | None = None
    pypi_default: bool = False
    extras: list[Name] = Field(default_factory=list)
    # CUDA libraries installed by name next to the framework (pinned), when its own extra cannot be used.
    cuda_packages: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+==[0-9][0-9A-Za-z.+-]*$")]] = Field(
        default_factory=list
    )


class Release(Model):
    python: list[Version] = Field(min_length=1)
    source: Url  # where the published CUDA builds and their install commands are listed
    python_source: Url | None = None  # where the supported Python versions are listed, if elsewhere
    variants: dict[Version, Variant] = Field(min_length=1)
    companions: dict[Name, Version] = Field(default_factory=dict)


class Framework(Model):
    package: Name
    releases: dict[Version, Release] = Field(min_length=1)


class Packages(Model):
    apt: list[Name] = Field(min_length=1)
    pip: Version
    default: dict[Name, Version] = Field(min_length=1)
    overrides: dict[str, dict[Name, Version]] = Field(default_factory=dict)


class AptMirrors(Model):
    ubuntu: Url
    debian: Url
    debian_security: Url


class MirrorProfile(Model):
    description: str
    apt: AptMirrors | None = None
    pypi: Url | None = None
    pytorch_wheels: Url | None = None
    source: Url | None = None


def _framework_name(name: str) -> str:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r} (allowed: {', '.join(FRAMEWORKS)})")
    return name


FrameworkName = Annotated[str, AfterValidator(_framework_name)]


class Matrix(Model):
    schema_version: Annotated[int, Field(ge=1, le=1)]
    release: Annotated[str, Field(pattern=r"^v\d+(\.\d+)*$")]
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


class _VersionsAsText(yaml.SafeLoader):
    """YAML loader that keeps numbers as text and refuses duplicate keys.

    Versions are never numbers: unquoted `3.10` would otherwise read as 3.1 and `11.0` as 11.
    """


# A copy of the resolver table: editing the inherited one would change every PyYAML loader in the process.
_VersionsAsText.yaml_implicit_resolvers = {
    first: [
        (tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _VersionsAsText, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)  # resolve `<<: *anchor` merges before looking for duplicates
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be plain text, not a list or mapping", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_VersionsAsText.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _key_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", item):
            parts.append(f".{item}" if parts else item)
        else:
            parts.append(f'."{item}"' if parts else f'"{item}"')
    return "".join(parts) or "(top level)"


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional so that a field's model class can be found."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            options = [a for a in get_args(annotation) if a is not type(None)]
            annotation = options[0] if len(options) == 1 else annotation
            if len(options) != 1:
                return annotation
        else:
            return annotation


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """Names of the keys allowed where an unknown key was found, by walking the model along its path."""
    node: Any = Matrix
    for item in loc[:-1]:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(item))
            if field is None:
                return []
            node = field.annotation
        elif get_origin(node) in (dict, list):
            node = get_args(node)[-1]
        else:
            return []
    node = _unwrap(node)
    return list(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def _problem_from_pydantic(error: Any, where_file: str) -> Problem:
    loc = tuple(error["loc"])
    in_key = bool(loc) and loc[-1] == "[key]"  # pydantic's marker for a problem with a mapping's key
    if in_key:
        loc = loc[:-1]
    path = f"{where_file}: {_key_path(loc)}"
    kind = error["type"]
    if in_key:
        return Problem(path, f"the key {error['input']!r} is not well formed: {error['msg']}")
    if kind == "extra_forbidden":
        return Problem(path, "unknown key", allowed_list(_fields_at(loc)) or "no further keys")
    if kind == "missing":
        return Problem(path, "required key is missing")
    if kind == "string_pattern_mismatch":
        pattern = error["ctx"]["pattern"]
        return Problem(path, f"{error['input']!r} is not well formed", f"text matching {pattern}")
    if kind == "literal_error":
        return Problem(path, f"{error['input']!r} is not allowed", str(error["ctx"]["expected"]))
    if kind == "string_type" and isinstance(error["input"], bool):
        return Problem(path, f"expected text, got the boolean {error['input']!r}", "quote it")
    if kind == "string_type" and isinstance(error["input"], (int, float)):
        return Problem(path, f"expected text, got the number {error['input']!r}", "quote it")
    if kind == "value_error":
        return Problem(path, str(error["msg"]).removeprefix("Value error, "))
    return Problem(path, f"{error['msg']} (got {error['input']!r})")


def parse_matrix(text: str, where_file: str = MATRIX_FILE) -> Matrix:
    """Parse and validate matrix text; raise InputError listing every problem."""
    try:
        data = yaml.load(text, Loader=_VersionsAsText)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{where_file}:{mark.line + 1}" if mark else where_file
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError([Problem(where, f"not valid YAML: {problem}")]) from None
    if not isinstance(data, dict):
        raise InputError([Problem(where_file, "must be a mapping of keys at the top level")])
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        raise InputError([_problem_from_pydantic(e, where_file) for e in exc.errors()]) from None
    problems = cross_check(matrix, where_file)
    if problems:
        raise InputError(problems)
    return matrix


def load_matrix(path: Path) -> Matrix:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([Problem(str(path), f"cannot read: {exc.strerror}")]) from None
    return parse_matrix(text, path.name)


def cross_check(m: Matrix, f: str) -> list[Problem]:
    """References between sections: each named CUDA, OS, flavor, release and package must exist."""
    problems: list[Problem] = []
    cudas, oses = list(m.cuda), list(m.os)
    pythons = sorted({spec.python for spec in m.os.values()}, key=version_key)
    for i, cuda in enumerate(m.axes.cuda):
        if cuda not in m.cuda:
            problems.append(
                Problem(f"{f}: axes.cuda[{i}]", f"CUDA {cuda} has no entry under `cuda:`", allowed_list(cudas))
            )
    for i, python in enumerate(m.axes.python):
        if python not in pythons:
            problems.append(
                Problem(f"{f}: axes.python[{i}]", f"no OS under `os:` provides Python {python}", allowed_list(pythons))
            )
    for i, flavor in enumerate(m.axes.flavor):
        if flavor not in m.flavors:
            problems.append(
                Problem(
                    f"{f}: axes.flavor[{i}]",
                    f"flavor {flavor!r} is not described under `flavors:`",
                    allowed_list(m.flavors),
                )
            )
    for key in set(m.images) ^ set(m.frameworks):
        section = "images" if key in m.images else "frameworks"
        problems.append(Problem(f"{f}: {section}.{key}", "every image needs a framework entry and vice versa"))
    for cuda, images in m.nvidia_cuda.toolkits.items():
        if cuda not in m.cuda:
            problems.append(
                Problem(f'{f}: nvidia_cuda.toolkits."{cuda}"', f"unknown CUDA version {cuda}", allowed_list(cudas))
            )
        for i, os_name in enumerate(images.os):
            if os_name not in m.os:
                problems.append(
                    Problem(
                        f'{f}: nvidia_cuda.toolkits."{cuda}".os[{i}]', f"unknown OS {os_name!r}", allowed_list(oses)
                    )
                )
    releases = {f"{fw.package}=={version}" for fw in m.frameworks.values() for version in fw.releases}
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
        if key not in releases:
            problems.append(
                Problem(f"{f}: packages.overrides.{key}", "names no framework release", allowed_list(sorted(releases)))
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
        if name == "none" and (profile.apt or profile.pypi or profile.pytorch_wheels):
            problems.append(Problem(f"{f}: mirrors.none", "the `none` profile must not set any mirror"))
        if profile.pytorch_wheels and "{variant}" not in profile.pytorch_wheels:
            problems.append(
                Problem(f"{f}: mirrors.{name}.pytorch_wheels", "must contain the `{variant}` placeholder (e.g. cu118)")
            )
    return problems


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def version_matches(full: str, wanted: str) -> bool:
    """Whether a release is the version asked for, where a partial version names its releases: 2.1 has 2.1.2."""
    return version_key(full)[: len(version_key(wanted))] == version_key(wanted)
