"""What kind of engine answers as Docker, read from `docker version` and `docker info` (their JSON), and what the
tasks can do there: one table, each kind with the one message it says and the needs it refuses. Pure: the runner
asks the engine (`Runner.engine`), this module only reads the answers."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from dlimages.core import usage


class Need(Enum):
    """What a task asks of the engine."""

    BUILDKIT = "builds: `docker buildx build` on the engine's own BuildKit"  # build, repro
    BASE = "the offline base: made as root with mmdebstrap, loaded into the engine"  # base
    DOCKER = "plain docker commands: run, pull, push, save, create, info"  # push, verify, smoke, bench, test, disk


class Kind(Enum):
    """An engine that is not a standard Docker 23.0+ with the buildx plugin (which has no kind: nothing to say)."""

    PODMAN = "Podman's Docker API"
    NO_BUILDX = "no buildx plugin"
    OLD = "Docker before 23.0"
    ROOTLESS = "rootless Docker"


@dataclass(frozen=True)
class Support:
    """What works on one kind of engine: `says` it in one line ({version}: the engine's); a task whose need is in
    `refuses` stops with it (exit 2) before it starts, any other task runs and says it first, as a note."""

    says: str
    refuses: frozenset[Need] = frozenset()


REPRODUCIBLE_SINCE = 23  # Docker 23.0 came with BuildKit 0.11, the first to honour SOURCE_DATE_EPOCH
ROOTLESS_BASE = f'sudo env DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock "$(command -v {usage.PROGRAM})" base'

# In the order the notes are said; Podman's is the only one said about Podman (it reports "name=rootless" and its own
# version, below 23, as Docker's fields).
SUPPORT: dict[Kind, Support] = {
    Kind.PODMAN: Support(
        "Podman {version} answers as the Docker engine, and Podman's Docker API has no BuildKit "
        f"(containers/podman#17836), which `docker buildx build` needs: `{usage.BUILD}` and `{usage.REPRO}` cannot "
        f"work on it, nor `{usage.BASE}`, whose image only builds use; `{usage.MATRIX}`, `render`, `doctor` and "
        "`lock`'s Python locks need no engine; push, verify, smoke, bench, test and disk are not supported on "
        "Podman (untested)",
        frozenset({Need.BUILDKIT, Need.BASE}),
    ),
    Kind.NO_BUILDX: Support(
        "the docker buildx plugin is missing (the docker CLI lists no `buildx` among its plugins), and "
        f"`{usage.BUILD}` and `{usage.REPRO}` run `docker buildx build`: install it (Debian 13: docker-buildx; "
        "Docker's apt repository: docker-buildx-plugin); `scripts/engine.sh` installs it only where no engine answers",
        frozenset({Need.BUILDKIT}),
    ),
    Kind.OLD: Support(
        f"Docker {{version}} is older than {REPRODUCIBLE_SINCE}.0, the first whose BuildKit (0.11) honours "
        "SOURCE_DATE_EPOCH: builds on it are untested here and never reproducible (two cold builds never give the "
        "same image ID)",
    ),
    Kind.ROOTLESS: Support(
        "rootless Docker {version}: builds use its BuildKit as on any Docker (untested rootless); `--gpus` (smoke, "
        "bench, `docker run`) needs NVIDIA's container toolkit set up for rootless mode (no-cgroups; "
        f"docs/troubleshooting.md); `{usage.BASE}` runs mmdebstrap as root, and root's docker reaches the rootful "
        f"engine's socket, not this one: `{ROOTLESS_BASE}` (untested)",
    ),
}


@dataclass(frozen=True)
class Engine:
    """The engine that answers: its kinds (none for a standard Docker with buildx) and its version as it says it."""

    kinds: tuple[Kind, ...]
    version: str

    def says(self, kind: Kind) -> str:
        return SUPPORT[kind].says.format(version=self.version or "(version unknown)")

    def refusal(self, need: Need) -> str | None:
        """Why a task with this need cannot work on this engine, or None when it can."""
        return next((self.says(kind) for kind in self.kinds if need in SUPPORT[kind].refuses), None)

    def notes(self) -> list[str]:
        """What a task that goes on says first: one line per kind."""
        return [self.says(kind) for kind in self.kinds]


def judge(version: Mapping[str, Any], info: Mapping[str, Any]) -> Engine:
    """The engine `docker version --format '{{json .}}'` and `docker info --format '{{json .}}'` describe (parsed).
    Podman answers through its Docker API (its version's components name "Podman Engine") or through podman-docker's
    `docker`, which is podman itself (its own `info`, whose host names Buildah); nothing is claimed from an empty
    `info` (an answer that could not be read)."""
    server = _mapping(version.get("Server"))
    components = {str(_mapping(each).get("Name")): each for each in _list(server.get("Components"))}
    if "Podman Engine" in components or "buildahVersion" in _mapping(info.get("host")):
        found = _mapping(components.get("Podman Engine")).get("Version") or _mapping(info.get("version")).get("Version")
        return Engine((Kind.PODMAN,), str(found or info.get("ServerVersion") or ""))
    if not info:
        return Engine((), str(server.get("Version") or ""))
    release = str(info.get("ServerVersion") or server.get("Version") or "")
    plugins = [_mapping(each) for each in _list(_mapping(info.get("ClientInfo")).get("Plugins"))]
    major = re.match(r"\d+", release)
    options = [str(option).split(",")[0] for option in _list(info.get("SecurityOptions"))]
    facts = {
        # A plugin the CLI found but cannot run carries an "Err"; a CLI before 19.03 lists none and runs none.
        Kind.NO_BUILDX: not any(each.get("Name") == "buildx" and not each.get("Err") for each in plugins),
        Kind.OLD: major is not None and int(major.group()) < REPRODUCIBLE_SINCE,
        Kind.ROOTLESS: "name=rootless" in options,
    }
    return Engine(tuple(kind for kind in SUPPORT if facts.get(kind)), release)


def read_engine(version: str, info: str) -> Engine:
    """`judge` on the two commands' output as printed (anything but a JSON object reads as empty)."""
    return judge(_json_object(version), _json_object(info))


def _json_object(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
