"""The NVIDIA container toolkit's part in a verdict, by its version: whether it loads an image's cuda-compat libraries
(forward compatibility) and on which paths, and where it checks NVIDIA_REQUIRE_CUDA at all. Pure.

Sources: the toolkit's CHANGELOG.md and release notes (https://github.com/NVIDIA/nvidia-container-toolkit/blob/main/
CHANGELOG.md, https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/release-notes.html):
libnvidia-container mounted the image's compat libraries since 1.0.0; 1.17.4 stopped by default (CVE-2025-23359,
feature flag `allow-cuda-compat-libs-from-container`); 1.17.5 brought them back through the `enable-cuda-compat`
hook of the nvidia runtime and CDI only (the `--gpus` hook still passes `--no-cntlibs`); 1.17.7 added
`cuda-compat-mode=ldconfig` as the default for the legacy hook (`--gpus`; a bug in that default was fixed in
1.17.8); 1.18 made jit-cdi the default mode of `--runtime=nvidia`. NVIDIA_REQUIRE_CUDA is evaluated by
nvidia-container-cli on the legacy path only (`--require`, src/cli/dsl.c); CSV mode checks cuda and arch; CDI and
jit-cdi check nothing in released toolkits (nvidia-container-toolkit#1470).

Where the toolkit does not load them, an image on an nvidia/cuda base runs on the host's driver alone (HOST_ALONE):
"the runtime hook will symlink libcuda from the host with precedence over the container", which "no apparent amount
of LD_LIBRARY_PATH or build-time ldconfig can mitigate" (nvidia-container-toolkit#934); 1.17.4's change "removed
'automatic' support for CUDA Forward compatibility" (#906), and the hook of 1.17.5 "does not work when only the
Docker --gpus flag is specified" (#1055).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlimages.core.errors import InputError, Problem
from dlimages.model.spec import version_key

_PRINTS = "`nvidia-ctk --version` or `nvidia-container-cli --version`"
TOOLKIT_ALLOWED = f"MAJOR.MINOR.PATCH, e.g. 1.17.8 ({_PRINTS}), or none (not installed)"
_VERSION = re.compile(r"(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})")
# What `nvidia-ctk --version` ("NVIDIA Container Toolkit CLI version 1.17.4") and `nvidia-container-cli --version`
# ("cli-version: 1.17.4") print first.
PRINTED = re.compile(r"(?:CLI version|cli-version:) ([0-9]+\.[0-9]+\.[0-9]+)")
# NVIDIA_REQUIRE_CUDA is checked only on the legacy path (`docker run --gpus`, --runtime=nvidia in legacy mode).
NOT_CHECKED_ON_CDI = (
    "the legacy path; CDI and jit-cdi, --runtime=nvidia's default from toolkit 1.18, check nothing: there it starts "
    "and CUDA fails at first use"
)
UNKNOWN = (
    "forward compatibility needs the container toolkit to load the image's cuda-compat libraries: up to 1.17.3 it "
    "does (--gpus and --runtime=nvidia); 1.17.4 only with its feature flag allow-cuda-compat-libs-from-container; "
    "1.17.5 and 1.17.6 through --runtime=nvidia or CDI, not plain --gpus; from 1.17.7 by default "
    "(cuda-compat-mode=ldconfig, unless disabled); --toolkit VERSION judges a known one"
)


HOST_ALONE = "https://github.com/NVIDIA/nvidia-container-toolkit/issues/934"


@dataclass(frozen=True)
class CompatLibraries:
    """Whether this toolkit loads an image's cuda-compat libraries by default, on each way of asking for GPUs, and
    the condition said with it."""

    with_gpus: bool  # `docker run --gpus` (the legacy hook)
    with_runtime: bool  # `--runtime=nvidia` and CDI
    condition: str

    @property
    def loads(self) -> bool:
        """Whether forward compatibility can work at all: on one way or both."""
        return self.with_gpus or self.with_runtime


NONE = "none"  # --toolkit none: the node has no NVIDIA container toolkit
# A node without a toolkit runs no GPU container at all; what it would run once one is installed is judged for a
# current toolkit, which loads the libraries by default.
ABSENT = (
    "this node has no NVIDIA container toolkit, so no container gets its GPUs; judged for one installed now "
    "(1.17.7 or later loads an image's cuda-compat libraries by default, cuda-compat-mode=ldconfig)"
)


def parse_toolkit(text: str) -> str:
    value = text.strip()
    if not _VERSION.fullmatch(value):
        raise InputError([Problem("--toolkit", f"{value[:40]!r} is not a toolkit version", TOOLKIT_ALLOWED)])
    return value


def printed_version(output: str) -> str | None:
    """The version in what the toolkit's CLIs print for --version, or None."""
    found = PRINTED.search(output)
    return found[1] if found else None


def compat_libraries(toolkit: str | None) -> CompatLibraries:
    """How a node's toolkit (None: not known; NONE: not installed) treats an image's cuda-compat libraries."""
    if toolkit is None:
        return CompatLibraries(True, True, UNKNOWN)
    if toolkit == NONE:
        return CompatLibraries(True, True, ABSENT)
    version = version_key(toolkit)
    said = f"container toolkit {toolkit}"
    if version < (1, 17, 4):
        return CompatLibraries(
            True, True, f"{said} loads the image's cuda-compat libraries (--gpus and --runtime=nvidia)"
        )
    if version == (1, 17, 4):
        return CompatLibraries(
            False,
            False,
            f"{said} does not load an image's cuda-compat libraries unless its feature flag "
            "allow-cuda-compat-libs-from-container is set (CVE-2025-23359)",
        )
    if version < (1, 17, 7):
        return CompatLibraries(
            False,
            True,
            f"{said} loads the image's cuda-compat libraries only through --runtime=nvidia or CDI (its "
            "enable-cuda-compat hook), not with plain --gpus",
        )
    return CompatLibraries(
        True,
        True,
        f"{said} loads the image's cuda-compat libraries (cuda-compat-mode=ldconfig, unless set to disabled)",
    )
