"""Compatibility rules: why a combination of axis values cannot become an image.

Each rule looks at one candidate and returns the reasons it fails, citing the source of the fact. The
facts themselves live in matrix.yaml; this module only says how to read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlimages.payload.dl_stack import FRAMEWORKS
from dlimages.spec import Matrix, Release, Variant, version_key, version_matches


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
                f"{title} has wheels for Python {', '.join(release.python)}, not {candidate.python}",
                release.python_source or release.source,
            )
        )
    if variant is not None:
        reasons += _base_reasons(matrix, candidate, title, release, variant)
    return reasons


def _base_reasons(matrix: Matrix, candidate: Candidate, title: str, release: Release, variant: Variant) -> list[Reason]:
    reasons: list[Reason] = []
    os_name = os_for_python(matrix, candidate.python)
    nvidia = matrix.nvidia_cuda
    if variant.cuda_libs == "wheel":
        if candidate.flavor != "runtime":
            reasons.append(
                Reason(
                    "no-duplicate-cuda",
                    f"{title} brings its own CUDA libraries in its wheels; a {candidate.flavor} base would ship "
                    "the toolkit's copies of the same libraries again",
                    release.source,
                )
            )
        return reasons
    images = nvidia.toolkits.get(candidate.cuda)
    if images is None:
        reasons.append(
            Reason("base-image", f"{nvidia.repository} has no images for CUDA {candidate.cuda}", nvidia.source)
        )
        return reasons
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
