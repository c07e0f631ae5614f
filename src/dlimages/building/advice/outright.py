"""What pip or the build says outright (a hash that does not match, a lock that misses one, a pin the index lacks,
`pip check`'s complaints), and the failure no rule knows, quoted from the failed step."""

from __future__ import annotations

import re
from collections.abc import Sequence

from dlimages.building.advice.diagnosis import Attempt, Diagnosis, Kind
from dlimages.building.advice.network import LOOKING_IN, PYPI_INDEX
from dlimages.building.advice.reading import PREFIX, Step, evidence_of, netloc, shorten, step_name
from dlimages.core import usage
from dlimages.model.selection import flags_for

# (what the output says, the kind, its summary, the advice); matched in order, any case.
LOCK_FAILURES: tuple[tuple[str, Kind, str, str], ...] = (
    (
        "DO NOT MATCH THE HASHES",
        "hash",
        "file hash mismatch",
        "A downloaded file does not match the hash the cell's lock records (images/<framework>/<cell>/*.lock): the "
        "index or mirror serves a different file, or the lock was edited. Nothing was installed from it; re-lock "
        f"(`{usage.LOCK} ...`) only if you trust the new file.",
    ),
    (
        "Hashes are required in --require-hashes mode",
        "lock",
        "lock misses a hash",
        f"The cell's lock misses a package or a hash (edited by hand?): run `{usage.LOCK}` for the cell.",
    ),
)
OTHER_FAILURES: tuple[tuple[str, Kind, str, str], ...] = (
    (
        "No matching distribution found for",
        "pin",
        "pinned version not on the index",
        "A pinned package version does not exist on the index: check the pins in matrix.yaml (a mirror may also "
        "lag behind upstream: try --mirror none or another profile).",
    ),
    (
        "Could not find a version that satisfies",
        "pin",
        "pinned version not on the index",
        "A pinned package version does not exist on the index: check the pins in matrix.yaml.",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "tls",
        "TLS certificate not trusted",
        "TLS verification failed: behind an intercepting proxy, pass its CA with --ca-bundle /path/ca.pem.",
    ),
    (
        "pull access denied",
        "base",
        "base image not pullable",
        f"The base image is not available locally and cannot be pulled: make it (`{usage.BASE}`).",
    ),
    (
        "Temporary failure resolving",
        "apt",
        "package mirror unreachable",
        "A package mirror is not reachable: choose another --mirror profile.",
    ),
    (
        "Unable to locate package",
        "apt-package",
        "apt package missing",
        "An apt package is missing from this OS release or mirror.",
    ),
)


def known_failure(text: str, table: Sequence[tuple[str, Kind, str, str]]) -> Diagnosis | None:
    lowered = text.lower()
    for needle, kind, summary, advice in table:
        if needle.lower() in lowered:
            return Diagnosis(kind, summary, advice, evidence=evidence_of(text.splitlines(), needle))
    return None


# `pip check`'s two complaints (pip/_internal/commands/check.py), one line per requirement that does not hold.
_PIP_CHECK = re.compile(
    r"^(?P<who>\S+) (?P<version>\S+) (?:has requirement (?P<wanted>.+), but you have (?P<have>\S+ \S+)"
    r"|requires (?P<missing>\S+), which is not installed)\.$"
)
MAX_CONFLICTS_SHOWN = 8


def pip_check_failure(step: Step, attempt: Attempt) -> Diagnosis | None:
    """`pip check` failed: every requirement the installed packages do not meet, in pip's words, and how to get a set
    that fits (re-lock; or, for a cell without a lock, the pin in matrix.yaml)."""
    found = [(m, text) for line in step.lines if (m := _PIP_CHECK.match(text := PREFIX.sub("", line.strip())))]
    if not found:
        return None
    said = list(dict.fromkeys(text for _, text in found))
    shown = said[:MAX_CONFLICTS_SHOWN]
    if len(said) > len(shown):
        shown.append(f"... and {len(said) - len(shown)} more")
    cell = attempt.cell
    relock = f"`{usage.LOCK} {flags_for(cell)}`" if cell is not None else f"`{usage.LOCK}` for the cell"
    locked = "requirements.lock" in step.header or "/mnt/requirements.lock" in step.text
    lines = [
        "Every package installed, but they do not fit together (`pip check`), so nothing was tagged:",
        *(f"    {text}" for text in shown),
        "Ways out:",
    ]
    if locked:
        lines.append(
            f"  - the cell's lock holds this set (edited by hand, or resolved from other pins): re-lock it, which "
            f"resolves the framework and the package set together: {relock}"
        )
    else:
        lines.append(
            f"  - this cell has no lock, so pip chose the versions: lock it where its index is reachable ({relock}), "
            "which resolves the framework and the package set together"
        )
    lines.append(
        "  - if uv cannot resolve the set either, it names the pin in matrix.yaml that excludes the other: relax that "
        "pin (packages.overrides for one framework release), then lock and build again"
    )
    first = found[0][0]
    needed = first.group("wanted") or first.group("missing")
    summary = (
        f"pip check: {first.group('who')} needs {shorten(needed, 40)}"
        if len(said) == 1
        else f"pip check: {len(said)} unmet requirements"
    )
    return Diagnosis("pip-check", summary, "\n".join(lines), evidence=shorten(said[0]))


_FROM_URL = re.compile(r"\bfrom (?P<url>https?://\S+)")


def with_hash_host(found: Diagnosis, step: Step) -> Diagnosis:
    """A hash mismatch names the host that served the file (pip prints "NAME==V from URL")."""
    if found.kind != "hash" or not (url := _FROM_URL.search(step.text)):
        return found
    host = netloc(url.group("url"))
    advice = found.advice.replace("the index or mirror serves", f"{host} serves", 1)
    return Diagnosis(found.kind, f"{found.summary} ({host})", advice, host, None, found.evidence)


def with_index(found: Diagnosis, step: Step) -> Diagnosis:
    """A version that is not there: on which index pip looked."""
    if found.kind != "pin":
        return found
    urls = [url for line in step.lines if (m := LOOKING_IN.match(line.strip())) for url in m.group("urls").split(",")]
    where = ", ".join(url.strip() for url in urls) or PYPI_INDEX or "PyPI (pip's default index)"
    return Diagnosis(found.kind, found.summary, f"{found.advice} pip looked in: {where}.", None, None, found.evidence)


def unknown_failure(step: Step) -> Diagnosis:
    """No known cause: the step that failed, its exit code and its last lines, quoted."""
    code = step.exit_code
    summary = f"build failed (exit code {code})" if code else "build failed"
    if not step.buildkit:
        last = next((line for line in reversed(step.lines) if line), "no output")
        return Diagnosis("unknown", summary, f"the build failed: {shorten(last, 300)}", evidence=shorten(last))
    own = [line for line in step.lines if line and not line.startswith(("ERROR:", "DONE", "CACHED"))]
    error = next((line for line in step.lines if line.startswith("ERROR:")), "")
    where = f" in step {step_name(step.header)}" if step.header else ""
    lines = [f"The build failed{where}" + (f" (exit code {code})" if code else "") + "; its last lines:"]
    lines += [f"    {shorten(line, 200)}" for line in own[-3:]] or [f"    {shorten(error, 200)}"]
    return Diagnosis("unknown", summary, "\n".join(lines), evidence=shorten(own[-1] if own else error))
