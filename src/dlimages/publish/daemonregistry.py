"""What dockerd says about registries: which ones it reaches without verified TLS (its RegistryConfig)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dlimages.core.runner import DEFAULT, Runner
from dlimages.publish.pushplan import daemon_treats_as_insecure

INSPECT_TIMEOUT_S = 30.0
# dockerd's own default: loopback registries without TLS, nothing else.
DEFAULT_REGISTRY_CONFIG: Mapping[str, Any] = {"InsecureRegistryCIDRs": ["127.0.0.0/8"], "IndexConfigs": {}}


def registry_config(runner: Runner) -> Mapping[str, Any]:
    """dockerd's RegistryConfig (which registries it reaches without verified TLS), or its defaults."""
    done = runner(["docker", "info", "--format", "{{json .RegistryConfig}}"], timeout=INSPECT_TIMEOUT_S)
    try:
        config = json.loads(done.out) if done.ok else None
    except (ValueError, RecursionError):
        config = None
    return config if isinstance(config, dict) else DEFAULT_REGISTRY_CONFIG


def insecure_registry(registry: str, runner: Runner = DEFAULT) -> bool:
    """Whether dockerd reaches `registry` without verified TLS (its insecure registries, 127.0.0.0/8 by default)."""
    return daemon_treats_as_insecure(registry, registry_config(runner))
