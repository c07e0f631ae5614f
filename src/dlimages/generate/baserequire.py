"""What a pinned `nvidia/cuda` base says it needs: `NVIDIA_REQUIRE_CUDA` read from the base's own config (skopeo
`inspect --config` of `tag@digest`), checked against matrix.yaml's record of it (`nvidia_cuda.toolkits.*.require_cuda`),
which the doctor, the labels and the provisioning guide read. `invoke bases --lock` runs the check, so a base NVIDIA
rebuilt with other driver clauses (as in 2023, when R418 and R450 were dropped) cannot leave the record stale unseen.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from dlimages.artifacts.baseslock import BaseLock
from dlimages.core.references import registry_is_loopback, split_tag
from dlimages.core.registry import PLATFORM_ARCH, PLATFORM_OS, RESOLVE_TIMEOUT_S
from dlimages.core.runner import Runner
from dlimages.model.cells import Cell
from dlimages.model.spec import Matrix

VARIABLE = "NVIDIA_REQUIRE_CUDA"


@dataclass(frozen=True)
class Requirement:
    """A pinned base's own value (None where it sets none), or why it could not be read."""

    ref: str  # tag@digest
    value: str | None = None
    problem: str | None = None


def config_argv(ref: str, *, tls_verify: bool = True, timeout: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """skopeo's command that prints the linux/amd64 image config of `ref` as JSON. A `name:tag@digest` is asked
    for as `name@digest`: skopeo refuses a reference with both ("invalid reference format"), and the digest is
    what names the image."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        ref = f"{split_tag(name)[0]}@{digest}"
    verify = str(tls_verify and not registry_is_loopback(ref)).lower()
    return [
        "skopeo", "--override-os", PLATFORM_OS, "--override-arch", PLATFORM_ARCH, "--command-timeout", f"{timeout:g}s",
        "inspect", "--config", f"--tls-verify={verify}", f"docker://{ref}",
    ]  # fmt: skip


def read_requirement(ref: str, runner: Runner, *, tls_verify: bool = True) -> Requirement:
    done = runner(config_argv(ref, tls_verify=tls_verify), timeout=RESOLVE_TIMEOUT_S + 15)
    if not done.ok:
        return Requirement(ref, problem=f"skopeo could not read its config: {done.last_line}")
    try:
        env = json.loads(done.out).get("config", {}).get("Env") or []
    except (ValueError, AttributeError):
        return Requirement(ref, problem="skopeo printed no image config")
    values = [item.split("=", 1)[1] for item in env if isinstance(item, str) and item.startswith(f"{VARIABLE}=")]
    return Requirement(ref, value=values[-1] if values else None)


def words(value: str | None) -> str | None:
    """The value as the toolkit reads it: clauses separated by any run of spaces (matrix.yaml folds long lines)."""
    return " ".join(value.split()) if value is not None else None


def stale_records(matrix: Matrix, cells: Iterable[Cell], lock: BaseLock, runner: Runner) -> list[str]:
    """For each pinned `nvidia/cuda` base of `cells`, a line where its own NVIDIA_REQUIRE_CUDA is not matrix.yaml's
    record of it (or cannot be read); nothing when every record matches."""
    lines: list[str] = []
    seen: set[str] = set()
    for cell in cells:
        pinned = lock.pinned(cell.base_image) if cell.cuda_source == "base" else None
        if pinned is None or pinned in seen:
            continue
        seen.add(pinned)
        found = read_requirement(pinned, runner)
        recorded = words(matrix.nvidia_cuda.toolkits[cell.cuda].require_cuda)
        where = f"matrix.yaml nvidia_cuda.toolkits.{cell.cuda}.require_cuda"
        if found.problem is not None:
            lines.append(f"UNCHECKED {where}: {pinned}: {found.problem}")
        elif words(found.value) != recorded:
            lines.append(
                f"STALE {where} is {recorded!r}, but {pinned} sets {VARIABLE}={found.value!r}: "
                "record the base's value (with its source), then `invoke render`"
            )
    return lines
