"""matrix.yaml's sections as frozen pydantic models: every value checked by its grammar, every key known."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from dlimages.core.grammar import NAME, URL_ALLOWED, VERSION, reference_problem, repository_problem, url_problem
from dlimages.core.references import REGISTRY_ALLOWED, registry_problems
from dlimages.model.requirecuda import REQUIRE_CUDA_ALLOWED, require_cuda_problem
from dlimages.payload.dl_stack import FRAMEWORKS

# ASCII only: a pattern with \d would let other scripts' digits (Arabic-Indic, fullwidth, ...) into tags and pins.
Version = Annotated[str, Field(pattern=rf"^{VERSION.pattern}$")]
Driver = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")]
# sm_90a: code for exactly that GPU (arch-specific PTX JIT-compiles on sm_90 only, not on newer GPUs).
Arch = Annotated[str, Field(pattern=r"^sm_[0-9]{2,3}a?$")]
Name = Annotated[str, Field(pattern=rf"^{NAME.pattern}$")]


def _checked(problem: Callable[[str], str | None], allowed: str, what: str = "") -> AfterValidator:
    """A validator that refuses a value its grammar finds a problem with, saying what is allowed."""

    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(f"{what}{found} (allowed: {allowed})")
        return value

    return AfterValidator(check)


def _registry_problem(value: str) -> str | None:
    return next((problem.message for problem in registry_problems(value, where="registry")), None)


def _framework_problem(name: str) -> str | None:
    return None if name in FRAMEWORKS else f"unknown framework {name!r}"


# What reaches a build: checked by the grammars of dlimages.core.grammar, so that no value can end a Dockerfile line,
# start a shell command or carry a credential. The value is never quoted back (it may hold a secret).
Url = Annotated[str, _checked(url_problem, URL_ALLOWED, "the URL ")]  # mirrors, package indexes: build args, pip.conf
SourceUrl = Annotated[  # where a fact comes from: shown to people only
    str, _checked(partial(url_problem, fragment=True), URL_ALLOWED + ", then an optional #fragment", "the URL ")
]
WheelsUrl = Annotated[  # a find-links page per CUDA build: {variant} is e.g. cu118
    str, _checked(partial(url_problem, placeholders=("{variant}",)), URL_ALLOWED + " and {variant}", "the URL ")
]
ImageRef = Annotated[
    str, _checked(reference_problem, "[registry[:port]/]repository[:tag][@sha256:...]", "the image reference ")
]
Repository = Annotated[
    str, _checked(repository_problem, "[registry[:port]/]repository, e.g. nvidia/cuda", "the repository ")
]
# HOST[:PORT][/PATH] that base paths follow
RegistryPrefix = Annotated[str, _checked(_registry_problem, REGISTRY_ALLOWED)]
RequireCuda = Annotated[str, _checked(require_cuda_problem, REQUIRE_CUDA_ALLOWED)]
FrameworkName = Annotated[str, _checked(_framework_problem, ", ".join(FRAMEWORKS))]


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
