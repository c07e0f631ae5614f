"""Load matrix.yaml into a frozen, validated model; every problem is reported at once with its key path."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dlimages.core.errors import InputError, Problem, allowed_list
from dlimages.core.grammar import (
    NAME,
    URL_ALLOWED,
    VERSION,
    reference_problem,
    repository_problem,
    url_problem,
)
from dlimages.core.references import registry_problems
from dlimages.model.keypaths import problem_from_pydantic
from dlimages.model.matrixyaml import MAX_MATRIX_BYTES, load_yaml
from dlimages.payload.dl_stack import FRAMEWORKS

MATRIX_FILE = "matrix.yaml"
# ASCII only: a pattern with \d would let other scripts' digits (Arabic-Indic, fullwidth, ...) into tags and pins.
Version = Annotated[str, Field(pattern=rf"^{VERSION.pattern}$")]
Driver = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")]
# sm_90a: code for exactly that GPU (arch-specific PTX JIT-compiles on sm_90 only, not on newer GPUs).
Arch = Annotated[str, Field(pattern=r"^sm_[0-9]{2,3}a?$")]
Name = Annotated[str, Field(pattern=rf"^{NAME.pattern}$")]


def _checked(problem: str | None, what: str, allowed: str) -> None:
    if problem is not None:
        raise ValueError(f"{what} {problem} (allowed: {allowed})")


def _url(value: str) -> str:
    _checked(url_problem(value), "the URL", URL_ALLOWED)
    return value


def _source_url(value: str) -> str:
    _checked(url_problem(value, fragment=True), "the URL", URL_ALLOWED + ", then an optional #fragment")
    return value


def _wheels_url(value: str) -> str:
    _checked(url_problem(value, placeholders=("{variant}",)), "the URL", URL_ALLOWED + " and {variant}")
    return value


def _image(value: str) -> str:
    _checked(reference_problem(value), "the image reference", "[registry[:port]/]repository[:tag][@sha256:...]")
    return value


def _registry_prefix(value: str) -> str:
    problems = registry_problems(value, where="registry")
    if problems:
        raise ValueError(problems[0].message + f" (allowed: {problems[0].allowed})")
    return value


def _repository(value: str) -> str:
    _checked(repository_problem(value), "the repository", "[registry[:port]/]repository, e.g. nvidia/cuda")
    return value


# What reaches a build: checked by the grammars of dlimages.core.grammar, so that no value can end a Dockerfile line,
# start a shell command or carry a credential. The value is never quoted back (it may hold a secret).
Url = Annotated[str, AfterValidator(_url)]  # mirrors and package indexes: build arguments and pip.conf
SourceUrl = Annotated[str, AfterValidator(_source_url)]  # where a fact comes from: shown to people only
WheelsUrl = Annotated[str, AfterValidator(_wheels_url)]  # a find-links page per CUDA build: {variant} is e.g. cu118
ImageRef = Annotated[str, AfterValidator(_image)]
Repository = Annotated[str, AfterValidator(_repository)]
RegistryPrefix = Annotated[str, AfterValidator(_registry_prefix)]  # HOST[:PORT][/PATH] that base paths follow


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
    min_driver: Driver  # the driver the toolkit release ships with: every feature, on every GPU
    compat_driver: Driver  # the floor under CUDA minor-version compatibility (no PTX JIT); min_driver if none
    gpu_archs: list[Arch] = Field(min_length=1)
    source: SourceUrl


# NVIDIA_REQUIRE_CUDA as the NVIDIA container toolkit reads it: alternatives separated by one space, each a
# comma-separated AND of conditions on the driver's CUDA version, the driver, the GPU's arch or its brand
# (libnvidia-container src/cli/dsl.c). The value reaches Dockerfiles, so nothing else may pass.
_REQUIRE_CONDITION = r"(?:(?:cuda|driver|arch)(?:>=|<=|!=|=|<|>)[0-9]+(?:\.[0-9]+)*|brand(?:=|!=)[a-z]+)"
_REQUIRE_TERM = rf"{_REQUIRE_CONDITION}(?:,{_REQUIRE_CONDITION})*"
REQUIRE_CUDA = re.compile(rf"{_REQUIRE_TERM}(?: {_REQUIRE_TERM})*")


def _require_cuda(value: str) -> str:
    if not REQUIRE_CUDA.fullmatch(value):
        raise ValueError(
            f"{value[:80]!r} is not an NVIDIA_REQUIRE_CUDA expression (allowed: conditions such as cuda>=11.8, "
            "driver>=470, driver<471, arch<8.0, brand=tesla; joined by commas (and), the groups by single spaces (or))"
        )
    return value


RequireCuda = Annotated[str, AfterValidator(_require_cuda)]


class OsSpec(Model):
    family: Literal["ubuntu", "debian"]
    codename: Name
    python: Version
    image: ImageRef
    bootstrap: bool = False
    source: SourceUrl


class NvidiaToolkitImages(Model):
    os: list[Name] = Field(min_length=1)
    cudnn: Version
    # NVIDIA_REQUIRE_CUDA as the tags' x86_64 base Dockerfile (`require_source`) sets it, verbatim; without it the
    # doctor takes `cuda>=X.Y` (the CUDA version's own driver) and counts on no forward compatibility.
    require_cuda: RequireCuda | None = None
    require_source: SourceUrl | None = None
    # Set when NVIDIA lists these tags as unsupported (end of life), to the page that lists them: such tags may be
    # deleted from the registries.
    end_of_life: SourceUrl | None = None

    @model_validator(mode="after")
    def _require_cuda_has_a_source(self) -> NvidiaToolkitImages:
        if self.require_cuda is not None and self.require_source is None:
            raise ValueError("require_cuda needs require_source: the base Dockerfile that sets NVIDIA_REQUIRE_CUDA")
        return self


class NvidiaCuda(Model):
    repository: Repository
    source: SourceUrl
    toolkits: dict[Version, NvidiaToolkitImages]


class ArchList(Model):
    sass: list[Arch]
    ptx: list[Arch]
    # The oldest driver that JIT-compiles the build's PTX: that of the CUDA release whose PTX ISA it carries (a driver
    # compiles the ISA of its own CUDA and older). Without it, JIT needs the build's own CUDA driver.
    jit_driver: Driver | None = None


class Caveat(Model):
    """A known failure of a build on some nodes that does not stop it from running: the doctor says it, with its
    source, on the nodes it concerns (any GPU of `arch`; a driver older than `driver_below`; all when neither)."""

    text: str = Field(min_length=1, max_length=400, pattern=r"^[ -~]+$")
    source: SourceUrl
    arch: list[Arch] = Field(default_factory=list)
    driver_below: Driver | None = None


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
    caveats: list[Caveat] = Field(default_factory=list)


class Release(Model):
    python: list[Version] = Field(min_length=1)
    source: SourceUrl  # where the published CUDA builds and their install commands are listed
    python_source: SourceUrl | None = None  # where the supported Python versions are listed, if elsewhere
    variants: dict[Version, Variant] = Field(min_length=1)
    companions: dict[Name, Version] = Field(default_factory=dict)
    # Requirements of the release that PyPI has only as source: locked by their sdist's hash and built in the
    # image, the one exception to wheels only. `source_builds_source` shows the PyPI file listing.
    source_builds: list[Name] = Field(default_factory=list)
    source_builds_source: SourceUrl | None = None
    # Packages the release needs at a version its own metadata does not hold it to (an upper bound it lacks):
    # installed and locked with the framework. `pins_source` shows why.
    pins: dict[Name, Version] = Field(default_factory=dict)
    pins_source: SourceUrl | None = None

    @model_validator(mode="after")
    def _source_builds_and_pins_have_a_source(self) -> Release:
        if self.source_builds and self.source_builds_source is None:
            raise ValueError("source_builds needs source_builds_source: the page showing PyPI has no wheel")
        if self.pins and self.pins_source is None:
            raise ValueError("pins needs pins_source: where the need for that version is shown")
        return self


SpdxExpression = Annotated[str, Field(pattern=r"^[A-Za-z0-9.+-]+( (AND|OR) [A-Za-z0-9.+-]+)*$")]


class Framework(Model):
    package: Name
    license: SpdxExpression  # the framework's own: org.opencontainers.image.licenses, with the others in the image
    license_source: SourceUrl
    releases: dict[Version, Release] = Field(min_length=1)


class Publisher(Model):
    """Who publishes the images, said in the OCI labels that registries and tools read: GHCR links an image to its
    repository by `source`, Renovate reads it for release notes."""

    vendor: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 .,_-]{0,99}$")]
    source: Url | None = None
    url: Url | None = None


class Packages(Model):
    apt: list[Name] = Field(min_length=1)
    pip: Version
    default: dict[Name, Version] = Field(min_length=1)
    # Pins that replace the default set's for the releases, or the Pythons, a key names (`PACKAGE` or `python`, then
    # conditions: tensorflow==2.4.0, torch>=2.5, python>=3.12), applied in the order given, later keys over earlier.
    overrides: dict[str, dict[Name, Version]] = Field(default_factory=dict)


class AptMirrors(Model):
    ubuntu: Url
    debian: Url
    debian_security: Url


class BaseMirror(Model):
    """Where a profile takes the Docker Hub base images from: `registry` + "/" + the Docker Hub path
    (ubuntu:22.04 -> REGISTRY/library/ubuntu:22.04), the prefix form public mirrors and Harbor projects use."""

    registry: RegistryPrefix
    source: SourceUrl  # the operator's own page: how the mirror is addressed, and its limits
    limits: str  # said in the build log of every build that uses it


class MirrorProfile(Model):
    description: str
    bases: BaseMirror | None = None
    apt: AptMirrors | None = None
    pypi: Url | None = None
    pytorch_wheels: WheelsUrl | None = None
    source: SourceUrl | None = None


def _framework_name(name: str) -> str:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r} (allowed: {', '.join(FRAMEWORKS)})")
    return name


FrameworkName = Annotated[str, AfterValidator(_framework_name)]


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
        # Non-blocking, so that opening a FIFO returns at once; only regular files are read (a FIFO would wait for
        # a writer, a link to /dev/zero never end), and never more than the limit.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(descriptor, "rb") as file:
            mode = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(mode):
                kind = "Is a directory" if stat.S_ISDIR(mode) else "not a regular file"
                raise InputError([Problem(str(path), f"cannot read: {kind}")])
            raw = file.read(MAX_MATRIX_BYTES + 1)
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
        if cuda not in m.cuda:
            problems.append(
                Problem(f'{f}: nvidia_cuda.toolkits."{cuda}"', f"unknown CUDA version {cuda}", allowed_list(cudas))
            )
        # The doctor knows a driver's CUDA version only relative to this entry's own (see compat.DriverRule).
        for condition in re.split(r"[ ,]", images.require_cuda or ""):
            if condition.startswith("cuda") and condition != f"cuda>={cuda}":
                problems.append(
                    Problem(
                        f'{f}: nvidia_cuda.toolkits."{cuda}".require_cuda',
                        f"the condition {condition!r} is not about CUDA {cuda}",
                        f"cuda>={cuda}",
                    )
                )
        for i, os_name in enumerate(images.os):
            if os_name not in m.os:
                problems.append(
                    Problem(
                        f'{f}: nvidia_cuda.toolkits."{cuda}".os[{i}]', f"unknown OS {os_name!r}", allowed_list(oses)
                    )
                )
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
_COMPARE = {
    "==": lambda a, b: a == b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}


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
