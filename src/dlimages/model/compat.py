"""Compatibility rules: why a combination of axis values cannot become an image, and which NVIDIA drivers run the
image a valid one becomes.

Each rule looks at one candidate and returns the reasons it fails, citing the source of the fact. The
facts themselves live in matrix.yaml; this module only says how to read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlimages.model.requirecuda import driver_key, require_holds, toolkit_number
from dlimages.model.sections import Release, Variant
from dlimages.model.spec import Matrix, version_key, version_matches
from dlimages.payload.dl_stack import FRAMEWORKS, parse_arch


@dataclass(frozen=True)
class Candidate:
    """One point of the product of the axes, before the rules judge it."""

    framework: str
    version: str
    cuda: str
    python: str
    flavor: str

    @property
    def title(self) -> str:
        """How people write the framework release, e.g. PyTorch 2.1.2."""
        return f"{FRAMEWORKS[self.framework].title} {self.version}"

    def describe(self) -> str:
        return f"{self.title} + CUDA {self.cuda} + Python {self.python} ({self.flavor})"

    def matches(
        self,
        *,
        framework: str | None = None,
        version: str | None = None,
        cuda: str | None = None,
        python: str | None = None,
        flavor: str | None = None,
    ) -> bool:
        """Whether this point has every axis value given (None: any value); a partial version, 2.1, has 2.1.2.

        The one predicate behind command-line selections and matrix.yaml's references to cells.
        """
        return (
            framework in (None, self.framework)
            and (version is None or version_matches(self.version, version))
            and cuda in (None, self.cuda)
            and python in (None, self.python)
            and flavor in (None, self.flavor)
        )


@dataclass(frozen=True)
class Reason:
    rule: str
    text: str
    source: str

    def __str__(self) -> str:
        return f"{self.text} [{self.rule}; {self.source}]"


def os_for_python(matrix: Matrix, python: str) -> str | None:
    """The OS whose own python3 is this version (the first listed, if several)."""
    return next((name for name, spec in matrix.os.items() if spec.python == python), None)


def cudnn_satisfies(provided: str, needed: str) -> bool:
    """cuDNN is compatible within a major version when the loaded minor is at least the built one."""
    have, want = version_key(provided), version_key(needed)
    return have[0] == want[0] and have[:2] >= want[:2]


def judge(matrix: Matrix, candidate: Candidate) -> list[Reason]:
    """Every reason the candidate is not a valid cell; empty when it is valid."""
    framework = matrix.frameworks[candidate.framework]
    release = framework.releases[candidate.version]
    title = candidate.title
    reasons: list[Reason] = []
    variant = release.variants.get(candidate.cuda)
    if variant is None:
        published = ", ".join(sorted(release.variants, key=version_key))
        reasons.append(
            Reason("cuda-build", f"{title} was published for CUDA {published}, not {candidate.cuda}", release.source)
        )
    if candidate.python not in release.python:
        reasons.append(
            Reason(
                "python-wheel",
                f"{_with_companions(title, release)} has wheels for Python {', '.join(release.python)}, "
                f"not {candidate.python}",
                release.python_source or release.source,
            )
        )
    if variant is not None:
        reasons += _base_reasons(matrix, candidate, title, release, variant)
    return reasons


def _with_companions(title: str, release: Release) -> str:
    """The release with the packages an image installs beside it: the Python list holds for all of them (torch
    1.13.1 has a cp311 wheel, torchvision 0.14.1 has none, so no 1.13.1 image can have Python 3.11)."""
    if not release.companions:
        return title
    return f"{title} with " + ", ".join(f"{name} {version}" for name, version in release.companions.items())


def _base_reasons(matrix: Matrix, candidate: Candidate, title: str, release: Release, variant: Variant) -> list[Reason]:
    nvidia = matrix.nvidia_cuda
    if variant.cuda_libs == "wheel":
        if candidate.flavor == "runtime":
            return []
        said = (
            f"{title} brings its own CUDA libraries in its wheels; a {candidate.flavor} base would ship the toolkit's "
            "copies of the same libraries again"
        )
        return [Reason("no-duplicate-cuda", said, release.source)]
    images = nvidia.toolkits.get(candidate.cuda)
    if images is None:
        return [Reason("base-image", f"{nvidia.repository} has no images for CUDA {candidate.cuda}", nvidia.source)]
    reasons: list[Reason] = []
    os_name = os_for_python(matrix, candidate.python)
    if os_name not in images.os:
        reasons.append(
            Reason(
                "base-image",
                f"{title} uses the system's CUDA; {nvidia.repository} {matrix.cuda[candidate.cuda].toolkit} "
                f"images exist for {', '.join(images.os)}, none with Python {candidate.python} ({os_name})",
                nvidia.source,
            )
        )
    if not cudnn_satisfies(images.cudnn, variant.cudnn):
        reasons.append(
            Reason(
                "cudnn",
                f"{title} needs cuDNN {variant.cudnn}; {nvidia.repository} CUDA {candidate.cuda} images "
                f"carry cuDNN {images.cudnn}",
                release.source,
            )
        )
    return reasons


# --- which drivers run a cell's image ----------------------------------------------------------------------------
#
# Sources, each for one part of the rule:
# - toolkit drivers and minor-version floors: matrix.yaml `cuda:` (CUDA release notes; minor-version compatibility
#   runs CUDA 11.x from 450.80.02 and 12.x from 525.60.13 on any GPU, without PTX JIT:
#   https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html);
# - what nvidia/cuda bases admit: matrix.yaml `nvidia_cuda:` (each base Dockerfile's NVIDIA_REQUIRE_CUDA);
# - forward compatibility through cuda-compat, on data-center GPUs only:
#   https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html; the toolkit loads the container's
#   cuda-compat libraries whenever their driver branch is newer than the host's (nvidia-container-toolkit
#   cmd/nvidia-cdi-hook/cudacompat, libnvidia-container src/cli/compat_mode.c), so other brands fail with CUDA
#   error 804 (https://github.com/NVIDIA/nvidia-container-toolkit/issues/291);
# - how the container toolkit reads NVIDIA_REQUIRE_CUDA: model/requirecuda.

# GPU brands as the container toolkit names them in `brand=` conditions: NVML's brand types, lower case
# (nvidia-container-toolkit internal/modifier/image_requirements.go, brandTypeToRequirementString; NVML_BRAND_UNKNOWN
# is "unknown", as libnvidia-container writes it and NVIDIA's bases list it), by NVML's numbering.
NVML_BRANDS: Mapping[int, str] = dict(
    enumerate(
        "unknown quadro tesla nvs grid geforce titan nvidiavapps nvidiavpc nvidiavcs nvidiavws nvidiacloudgaming "
        "quadrortx nvidiartx nvidia geforcertx titanrtx".split()
    )
)
# Data-center GPUs: NVML reports Tesla for them before R460 (whose NVML added the NVIDIA brand) and NVIDIA since
# (an H200 on 580.159.04, a Tesla T4 on 530.30.02). Only these get forward compatibility.
DATA_CENTER_BRANDS = ("tesla", "nvidia")
# One alternative of NVIDIA_REQUIRE_CUDA that admits one older driver branch for one brand, as NVIDIA's bases write
# it: "brand=tesla,driver>=470,driver<471" gives ("tesla", "470").
BRANCH_CLAUSE = re.compile(r"(?:^| )brand=([a-z]+),driver>=([0-9]+),driver<[0-9]+(?= |$)")

# How an image runs on a GPU with a given driver.
TOOLKIT_DRIVER = "toolkit driver"
MINOR_VERSION = "minor-version compatibility"
FORWARD_COMPAT = "forward compatibility"
# Why it does not.
BELOW_COMPAT_FLOOR = "below the minor-version floor"
NEEDS_JIT = "needs PTX JIT"
NOT_ADMITTED = "not admitted"
COMPAT_NOT_ON_BRAND = "forward compatibility not on this brand"


@dataclass(frozen=True)
class DriverRule:
    """Which NVIDIA drivers run a cell's image, and how: the one rule that the image's NVIDIA_REQUIRE_CUDA, its
    driver labels and the doctor's verdicts all derive from.

    Example (PyTorch 2.1.2 + CUDA 11.8 from its wheels): toolkit_driver 520.61.05, compat_driver 450.80.02,
    require_cuda "cuda>=11.8 driver>=450.80.2": any GPU with a driver from 520.61.05, or from 450.80.02 through
    minor-version compatibility (the wheels carry machine code, so no PTX JIT is needed).
    """

    cuda: str  # "11.8"
    toolkit_driver: str  # the driver the CUDA release ships with: every feature, on any GPU
    compat_driver: str  # the oldest driver that runs it on any GPU brand, where no PTX JIT is needed
    jit_from: str | None  # "8.0": GPUs of this compute capability and newer run this build only through PTX JIT
    cuda_compat: str | None  # the driver branch of the base's cuda-compat libraries ("520"); None without them
    require_cuda: str  # NVIDIA_REQUIRE_CUDA in the image: set by its Dockerfile (wheels) or by its nvidia/cuda base
    jit_driver: str | None = None  # the oldest driver that JIT-compiles the PTX, for GPUs of jit_from's major
    # An nvidia/cuda base's: the oldest driver that runs it where the container toolkit leaves the base's cuda-compat
    # libraries unloaded, so that CUDA runs on the host's driver alone (its CUDA major's minor-version floor); None
    # for wheels, whose compat_driver is that floor already.
    minor_floor: str | None = None

    def jit_by(self, arch: str | None) -> str:
        """The oldest driver that runs the build's PTX on a GPU of `arch` ("8.6"): `jit_driver` within the major
        architecture its PTX was made for (a newer one postdates that PTX), else the build's own CUDA driver."""
        if self.jit_driver and self.jit_from and arch and driver_key(arch)[0] == driver_key(self.jit_from)[0]:
            return self.jit_driver
        return self.toolkit_driver

    @property
    def forward_compat_branches(self) -> tuple[str, ...]:
        """Older driver branches on which data-center GPUs run the image through the base's cuda-compat libraries:
        those the requirement admits for a data-center brand. Empty without cuda-compat (wheel cells).

        Example: CUDA 11.8 on nvidia/cuda -> ("450", "470").
        """
        if self.cuda_compat is None:
            return ()
        branches = {
            int(branch)
            for brand, branch in BRANCH_CLAUSE.findall(self.require_cuda)
            if brand in DATA_CENTER_BRANDS and int(branch) < int(self.cuda_compat)
        }
        return tuple(str(branch) for branch in sorted(branches))

    def admits(self, driver: str, *, brand: str | None, arch: str | None) -> bool:
        """Whether the container toolkit starts the image on a GPU of this brand and arch ("8.6") with this driver.

        The driver's CUDA version is known here only relative to the cell's own: at least it on the toolkit driver's
        branch and newer ones, below it before (every `cuda` condition names the cell's CUDA: spec.cross_check).
        """
        cuda = self.cuda if self.supports_cuda(driver) else "0"
        return require_holds(self.require_cuda, {"cuda": cuda, "driver": driver, "brand": brand, "arch": arch})

    def supports_cuda(self, driver: str) -> bool:
        """Whether the driver supports this CUDA release itself: a driver reports the CUDA version of its branch, so
        520.56.06, older than CUDA 11.8's listed 520.61.05, reports 11.8 too (nvidia-smi's "CUDA Version", what the
        toolkit's `cuda>=` compares with)."""
        return driver_key(driver)[0] >= driver_key(self.toolkit_driver)[0]

    def fit(
        self, driver: str, *, brand: str | None, arch: str | None, needs_jit: bool, compat_libs: bool = True
    ) -> DriverFit:
        """How the image runs on one GPU with this driver, or why not; `needs_jit`: the build has only PTX for it;
        `compat_libs`: whether the container toolkit loads the base's cuda-compat libraries (model/toolkit).

        Without them an image on an nvidia/cuda base runs on the host's driver alone: through minor-version
        compatibility from its CUDA major's floor, as a wheel image does (the toolkit mounts the host's libcuda ahead
        of the container's: nvidia-container-toolkit#934).
        Example: TensorFlow 2.4.4 on nvidia/cuda 11.0.3, a Tesla T4 ("7.5") on 418.87.01 -> forward compatibility;
        TensorFlow 2.13.1 on nvidia/cuda 11.8.0, a T4 on 470.82.01 without the compat libraries -> minor-version
        compatibility.
        """
        have = driver_key(driver)
        if self.supports_cuda(driver):
            return DriverFit(TOOLKIT_DRIVER, "")
        floor = self.compat_driver
        if self.cuda_compat is not None:
            if not self.admits(driver, brand=brand, arch=arch):
                return DriverFit(None, NOT_ADMITTED, needs=self.toolkit_driver)
            if have[0] < int(self.cuda_compat):
                if compat_libs and brand in DATA_CENTER_BRANDS:
                    return DriverFit(FORWARD_COMPAT, "")
                if compat_libs:
                    return DriverFit(None, COMPAT_NOT_ON_BRAND, needs=self.toolkit_driver)
                floor = self.minor_floor or self.toolkit_driver
        if have < driver_key(floor):
            return DriverFit(None, BELOW_COMPAT_FLOOR, needs=self.jit_by(arch) if needs_jit else floor)
        if needs_jit and have < driver_key(self.jit_by(arch)):
            return DriverFit(None, NEEDS_JIT, needs=self.jit_by(arch))
        return DriverFit(MINOR_VERSION, "")


@dataclass(frozen=True)
class DriverFit:
    """How an image runs on one GPU (`path`, None when it does not) and, when it does not, why and which driver
    would run it there (`needs`)."""

    path: str | None
    cause: str
    needs: str | None = None


def jit_from(sass: Sequence[str], ptx: Sequence[str]) -> str | None:
    """The compute capability ("8.0") from which every GPU runs a build only through PTX JIT, or not at all; None
    when no GPU needs JIT (no PTX), or when the GPUs that do are not simply all those from one capability on.

    A cubin sm_XY runs on GPUs X.Y to X.9; PTX compute_XY on any GPU from X.Y (CUDA's rule, dl_stack.entry_runs_on).
    Example: TensorFlow's sm_35 ... sm_75 cubins with compute_80 PTX -> "8.0"; PyTorch's cubins only -> None.
    """
    cubins = [(entry.major, entry.minor) for entry in map(parse_arch, sass) if entry is not None]
    ptxs = [(entry.major, entry.minor) for entry in map(parse_arch, ptx) if entry is not None]
    if not ptxs:
        return None
    point = min(ptxs)
    while any(major == point[0] and minor <= point[1] for major, minor in cubins):
        point = (point[0] + 1, 0)
    if any(cubin >= point for cubin in cubins):
        return None  # cubins beyond the first GPU that needs JIT: no single bound describes it
    return f"{point[0]}.{point[1]}"


def wheel_require_cuda(
    cuda: str, toolkit_driver: str, compat_driver: str, jit: str | None, jit_driver: str | None = None
) -> str:
    """NVIDIA_REQUIRE_CUDA for an image whose CUDA comes from the framework's wheels: CUDA `cuda`'s own driver, or
    the minor-version floor on the GPUs the wheels carry machine code for (below `jit`).

    The toolkit compares `cuda>=` with the CUDA version the driver supports, so a bare `cuda>=11.8` would refuse
    drivers 450.80.02 to 520 that run these wheels; the `driver>=` alternative admits them. Example:
    wheel_require_cuda("11.8", "520.61.05", "450.80.02", "8.0") == "cuda>=11.8 driver>=450.80.2,arch<8.0"; with a
    `jit_driver` the GPUs of the PTX's major architecture are admitted from it: "... driver>=455.23.5,arch<9.0".
    """
    if driver_key(compat_driver) >= driver_key(toolkit_driver):
        return f"cuda>={cuda}"
    floor = f"driver>={toolkit_number(compat_driver)}" + (f",arch<{jit}" if jit else "")
    if jit and jit_driver and driver_key(jit_driver) < driver_key(toolkit_driver):
        floor += f" driver>={toolkit_number(jit_driver)},arch<{driver_key(jit)[0] + 1}.0"
    return f"cuda>={cuda} {floor}"


def driver_rule(matrix: Matrix, cuda: str, variant: Variant) -> DriverRule:
    """The driver rule of a valid cell: CUDA `cuda` from the framework's wheels or from an nvidia/cuda base."""
    toolkit = matrix.cuda[cuda]
    jit = jit_from(variant.arch.sass, variant.arch.ptx)
    if variant.cuda_libs == "wheel":
        jit_driver = variant.arch.jit_driver
        require = wheel_require_cuda(cuda, toolkit.min_driver, toolkit.compat_driver, jit, jit_driver)
        return DriverRule(cuda, toolkit.min_driver, toolkit.compat_driver, jit, None, require, jit_driver)
    # The base's cuda-compat package carries its toolkit driver's libraries (cuda-compat-11-8 is 520.61.05). Below
    # that branch the toolkit loads them, and they run on data-center GPUs only: no brand-independent floor below
    # the toolkit driver.
    images = matrix.nvidia_cuda.toolkits[cuda]
    branch = toolkit.min_driver.split(".")[0]
    require = images.require_cuda or f"cuda>={cuda}"
    return DriverRule(
        cuda, toolkit.min_driver, toolkit.min_driver, jit, branch, require, minor_floor=toolkit.compat_driver
    )
