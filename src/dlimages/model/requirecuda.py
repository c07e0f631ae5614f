"""NVIDIA_REQUIRE_CUDA as the NVIDIA container toolkit reads it: the grammar matrix.yaml's values must match, how
libnvidia-container evaluates it for one GPU, and driver versions as it compares and writes them.

Source: libnvidia-container src/cli/dsl.c and configure.c (https://github.com/NVIDIA/libnvidia-container), per
visible GPU; `cuda` is the CUDA version the driver supports, `driver` the driver version, `arch` the GPU's compute
capability, `brand` NVML's brand of the GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from operator import eq, ge, gt, le, lt, ne

# Alternatives separated by one space, each a comma-separated AND of conditions on the driver's CUDA version, the
# driver, the GPU's arch or its brand. The value reaches Dockerfiles, so nothing else may pass.
_GRAMMAR_CONDITION = r"(?:(?:cuda|driver|arch)(?:>=|<=|!=|=|<|>)[0-9]+(?:\.[0-9]+)*|brand(?:=|!=)[a-z]+)"
_GRAMMAR_TERM = rf"{_GRAMMAR_CONDITION}(?:,{_GRAMMAR_CONDITION})*"
REQUIRE_CUDA = re.compile(rf"{_GRAMMAR_TERM}(?: {_GRAMMAR_TERM})*")
REQUIRE_CUDA_ALLOWED = (
    "conditions such as cuda>=11.8, driver>=470, driver<471, arch<8.0, brand=tesla; joined by commas (and), the "
    "groups by single spaces (or)"
)


def require_cuda_problem(value: str) -> str | None:
    """What is wrong with an NVIDIA_REQUIRE_CUDA expression, or None."""
    return None if REQUIRE_CUDA.fullmatch(value) else f"{value[:80]!r} is not an NVIDIA_REQUIRE_CUDA expression"


def driver_key(version: str) -> tuple[int, ...]:
    """A driver (or any dotted) version for comparison, padded with zeros: "450.80" == "450.80.0" < "450.80.02"."""
    parts = tuple(int(part) for part in version.split("."))
    return parts + (0,) * (3 - len(parts))


def require_holds(expression: str, facts: Mapping[str, str | None]) -> bool:
    """Whether an NVIDIA_REQUIRE_CUDA expression holds for one GPU, as libnvidia-container evaluates it.

    Alternatives are separated by spaces and each is a comma-separated AND (src/cli/dsl.c: dsl_evaluate); versions
    compare numerically part by part with missing parts zero (dsl_compare_version), brands without case
    (dsl_compare_string). A fact that is None is unknown and, as in the toolkit, satisfies its condition.
    Example: require_holds("cuda>=11.8 brand=tesla,driver>=470,driver<471",
    {"cuda": "11.4", "driver": "470.82.01", "brand": "tesla", "arch": "8.0"}) is True.
    """
    return any(
        all(_condition_holds(condition, facts) for condition in term.split(",") if condition)
        for term in expression.split(" ")
        if term
    )


_CONDITION = re.compile(r"([a-z]+)(>=|<=|!=|=|<|>)(.+)")
_COMPARE = {"=": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge}


def _condition_holds(condition: str, facts: Mapping[str, str | None]) -> bool:
    match = _CONDITION.fullmatch(condition)
    if match is None or match[1] not in facts:
        raise ValueError(f"{condition!r} is not an NVIDIA_REQUIRE_CUDA condition")
    name, operator, wanted = match.groups()
    have = facts[name]
    if have is None:
        return True
    if name == "brand":
        equal = have.lower() == wanted.lower()
        return equal if operator == "=" else not equal if operator == "!=" else False
    left, right = driver_key(have), driver_key(wanted)
    width = max(len(left), len(right))
    return bool(_COMPARE[operator](left + (0,) * (width - len(left)), right + (0,) * (width - len(right))))


def toolkit_number(driver: str) -> str:
    """A driver version as NVIDIA_REQUIRE_CUDA must write it: without leading zeros ("450.80.02" -> "450.80.2").

    The toolkit's Go evaluator (CDI and CSV modes) parses values as semantic versions, which refuse leading zeros;
    libnvidia-container reads both forms as the same number (internal/requirements/constraints/property.go).
    """
    return ".".join(str(int(part)) for part in driver.split("."))
