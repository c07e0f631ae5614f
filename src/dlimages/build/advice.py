"""Why a build failed and the way out: reads a failed build's output (BuildKit's plain progress, with the pip and apt
lines of its RUN steps) and names what failed, the host that failed, and what to run instead.

Pure: output lines, the build that failed (`Attempt`) and what matrix.yaml offers (`Remedies`) in, a `Diagnosis`
out. Nothing here asks Docker or the network, so the advice works when the engine itself is what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from dlimages.build.engine import ENGINE_SCRIPT
from dlimages.build.mirrors import HOST_PROFILE
from dlimages.core import usage
from dlimages.core.references import split_tag
from dlimages.model.cells import Cell
from dlimages.model.selection import flags_for
from dlimages.model.spec import Matrix, version_key

Kind = Literal[
    "engine",  # no Docker engine (or no docker CLI) to build with
    "disk",  # no space left
    "base",  # the base image cannot be pulled
    "hash",  # a downloaded file differs from the one the lock records
    "lock",  # the lock misses a package or a hash
    "pip-check",  # everything installed, but `pip check` found requirements the installed set does not meet
    "pytorch-index",  # PyTorch's wheel index (or its find-links page, or a mirror of them) is not reachable
    "pypi",  # PyPI or the pip index that replaces it is not reachable (or not trusted)
    "apt",  # the apt mirror is not reachable
    "pin",  # the index is reachable but has no such version
    "tls",  # a certificate is not trusted, outside pip
    "apt-package",  # the apt mirror is reachable but has no such package
    "unknown",
]


def _pip_default_index() -> str | None:
    """pip's default index, which pip does not print, as pip itself names it (None without pip)."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        return None
    return str(PyPI.simple_url)


MIRROR_BASES = usage.BASES_MIRROR  # the task that copies every base into a team's own registry, once
PYPI_INDEX = _pip_default_index()
EVIDENCE_CHARS = 320  # the quoted line of output, shortened in the middle beyond this
STEP_CHARS = 90


@dataclass(frozen=True)
class Remedies:
    """What matrix.yaml offers a failed build: the mirror profiles by what they mirror, and the valid cells (one on
    the offline base needs no registry, one on PyPI's wheels no PyTorch index)."""

    base_mirrors: tuple[tuple[str, str, str], ...] = ()  # (profile, registry prefix, its limits) per `bases`
    pypi: tuple[str, ...] = ()  # profiles with a PyPI mirror
    apt: tuple[str, ...] = ()  # profiles with an apt mirror
    pytorch_wheels: tuple[str, ...] = ()  # profiles that mirror PyTorch's CUDA wheels
    bases_only: tuple[str, ...] = ()  # profiles that change the bases and nothing else
    cells: tuple[Cell, ...] = ()

    @classmethod
    def from_matrix(cls, matrix: Matrix, cells: Iterable[Cell]) -> Remedies:
        profiles = list(matrix.mirrors.items())
        return cls(
            base_mirrors=tuple((n, p.bases.registry, p.bases.limits) for n, p in profiles if p.bases is not None),
            pypi=tuple(n for n, p in profiles if p.pypi),
            apt=tuple(n for n, p in profiles if p.apt is not None),
            pytorch_wheels=tuple(n for n, p in profiles if p.pytorch_wheels),
            bases_only=tuple(n for n, p in profiles if p.bases and not (p.apt or p.pypi or p.pytorch_wheels)),
            cells=tuple(cells),
        )


@dataclass(frozen=True)
class Attempt:
    """The build the output came from, as far as the advice cares (builder.attempt_of reads it off a BuildPlan)."""

    cell: Cell | None = None
    profile: str = "none"
    base_image: str | None = None  # BASE_IMAGE as passed: the cell's base, or its name in a registry mirror
    pip_index: str | None = None
    torch_index: str | None = None
    torch_find_links: str | None = None


@dataclass(frozen=True)
class Diagnosis:
    kind: Kind
    summary: str  # one short line, for a table cell: "PyPI unreachable (127.0.0.1:9)"
    advice: str  # what failed, from where, and the ways out; several lines, bullets indented by two
    host: str | None = None  # the host that failed, as the error names it
    image: str | None = None  # the base image that could not be pulled
    evidence: str | None = None  # the line of output that shows it, shortened


def diagnose(output: Sequence[str], attempt: Attempt | None = None, remedies: Remedies | None = None) -> Diagnosis:
    """What the output of a failed build says went wrong, and the way out."""
    attempt = attempt or Attempt()
    remedies = remedies or Remedies()
    for finder in (_engine, _disk, _lost_layer):
        found = finder(output)
        if found is not None:
            return found
    step = _failed_step(output)
    base = _base_failure(step, attempt, remedies)
    if base is not None:
        return base
    known = _known(step.text, _LOCK_FAILURES)
    if known is not None:
        return _with_hash_host(known, step)
    # Before the network: a step that retried a download and then installed everything can still fail its check.
    conflicts = _pip_check_failure(step, attempt)
    if conflicts is not None:
        return conflicts
    events = _network_events(step, attempt)
    if events:
        return _network_failure(events, attempt, remedies)
    known = _known(step.text, _OTHER_FAILURES)
    if known is not None:
        return _with_index(known, step)
    return _unknown(step)


# --- reading BuildKit's output ---------------------------------------------------------------------------------------

_STEP_LINE = re.compile(r"^#(\d+) (?:\d+\.\d+ )?(.*)$")
_PREFIX = re.compile(r"^(?:#\d+ )?(?:\d+\.\d+ )?")  # BuildKit's step number and time, also in its error recap
_EXIT_CODE = re.compile(r"did not complete successfully: exit code: (\d+)")


@dataclass(frozen=True)
class _Step:
    """The step BuildKit reports as failed: its header ("[stage-0 4/9] RUN ..."), its own output lines without the
    `#N` and time prefixes, and the build's final `ERROR:` lines; every line when the output is not BuildKit's."""

    header: str
    lines: tuple[str, ...]
    buildkit: bool

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def exit_code(self) -> str | None:
        found = _EXIT_CODE.search(self.text)
        return found.group(1) if found else None


def _failed_step(output: Sequence[str]) -> _Step:
    parsed = [(m.group(1), m.group(2)) if (m := _STEP_LINE.match(line)) else (None, line) for line in output]
    errors = [n for n, text in parsed if n is not None and text.startswith("ERROR:")]
    failed = next((n for n, text in parsed if n in errors and "context canceled" not in text), None)
    failed = failed or (errors[0] if errors else None)
    if failed is None:
        return _Step("", tuple(line.strip() for line in output), buildkit=False)
    own = [text for n, text in parsed if n == failed]
    header = next((text for text in own if text.startswith("[")), "")
    final = [text.strip() for n, text in parsed if n is None and text.startswith("ERROR:")]
    return _Step(header, tuple(text for text in own if text != header) + tuple(final), buildkit=True)


def _shorten(text: str, limit: int = EVIDENCE_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def _step_name(header: str) -> str:
    """A failed step's header without its mounts, shortened: "[stage-0 4/9] RUN umask 0022 && ..."."""
    text = " ".join(word for word in header.split() if not word.startswith("--mount="))
    return text if len(text) <= STEP_CHARS else text[: STEP_CHARS - 3] + "..."


# --- why a connection failed, as the advice says it ------------------------------------------------------------------

Trouble = Literal["down", "dns", "tls", "auth", "rate", "timeout", "http", "missing", "proxy", "other"]

# (what the error says, lowercase; how the advice says it; what kind of trouble), specific before general.
_REASONS: tuple[tuple[str, str, Trouble], ...] = (
    ("connection refused", "connection refused", "down"),
    ("no such host", "the name does not resolve (no such host)", "dns"),
    ("name or service not known", "the name does not resolve", "dns"),
    ("temporary failure in name resolution", "the name does not resolve", "dns"),
    ("temporary failure resolving", "the name does not resolve", "dns"),
    ("could not resolve", "the name does not resolve", "dns"),
    ("no address associated with hostname", "the name does not resolve", "dns"),
    ("certificate_verify_failed", "its TLS certificate is not trusted (CERTIFICATE_VERIFY_FAILED)", "tls"),
    ("x509:", "its TLS certificate is not trusted (x509)", "tls"),
    ("certificate verification failed", "its TLS certificate is not trusted", "tls"),
    ("sslerror(permissionerror", "pip cannot read its CA bundle (permission denied)", "tls"),
    ("401 unauthorized", "it asks for credentials (401 Unauthorized)", "auth"),
    ("http error 401", "it asks for credentials (401)", "auth"),
    ("403 forbidden", "it refused access (403 Forbidden)", "auth"),
    ("http error 403", "it refused access (403)", "auth"),
    ("pull access denied", "pull access denied (no such repository, or it needs credentials)", "auth"),
    ("unauthorized", "it asks for credentials (unauthorized)", "auth"),
    ("authentication required", "it asks for credentials", "auth"),
    ("toomanyrequests", "rate limited (429 Too Many Requests)", "rate"),
    ("429 too many requests", "rate limited (429 Too Many Requests)", "rate"),
    ("server gave http response to https client", "it speaks plain HTTP, the engine asked for HTTPS", "http"),
    ("cannot connect to proxy", "the proxy cannot be reached", "proxy"),
    ("proxyerror", "the proxy refused the connection", "proxy"),
    ("network is unreachable", "the network is unreachable", "down"),
    ("timed out", "timed out", "timeout"),
    ("timeout", "timed out", "timeout"),
    ("context deadline exceeded", "timed out", "timeout"),
    ("404  not found", "404 Not Found (the mirror lacks the file)", "missing"),
    ("404 not found", "404 Not Found", "missing"),
    ("manifest unknown", "no such image there (manifest unknown)", "missing"),
    (": not found", "no such image there (not found)", "missing"),
    ("could not connect to", "cannot connect", "down"),
    ("unable to connect to", "cannot connect", "down"),
)


def _reason(text: str) -> tuple[str, Trouble]:
    lowered = text.lower()
    for needle, said, trouble in _REASONS:
        if needle in lowered:
            return said, trouble
    return _shorten(text, 120), "other"


def _netloc(url: str) -> str:
    """host[:port] of a URL, without the scheme's default port."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port
    return host if port is None or (parts.scheme, port) in (("https", 443), ("http", 80)) else f"{host}:{port}"


def _either(names: Sequence[str]) -> str:
    return "|".join(names)


# --- the engine and the disk -----------------------------------------------------------------------------------------


def _engine(output: Sequence[str]) -> Diagnosis | None:
    text = "\n".join(output)
    if "cannot connect to the docker daemon" in text.lower():
        return Diagnosis(
            "engine",
            "Docker engine not reachable",
            f"The Docker engine is not reachable: start dockerd (on Debian 12, `bash {ENGINE_SCRIPT}` installs and "
            f"starts one; `{usage.BUILD}` does that itself unless --no-engine-setup), then rerun. Nothing was built.",
            evidence=_evidence(output, "cannot connect to the docker daemon"),
        )
    if "permission denied while trying to connect to the docker daemon" in text.lower():
        return Diagnosis(
            "engine",
            "no access to the Docker engine",
            "This user may not use the Docker engine's socket: add it to the `docker` group (then log in again) or "
            "build as root. Nothing was built.",
            evidence=_evidence(output, "permission denied while trying to connect"),
        )
    if re.search(r"^cannot run docker\b", text, re.MULTILINE):
        return Diagnosis(
            "engine",
            "docker CLI not installed",
            f"The docker CLI is not installed: on Debian 12, `bash {ENGINE_SCRIPT}` installs the engine, the CLI and "
            "buildx. Nothing was built.",
            evidence=_evidence(output, "cannot run docker"),
        )
    return None


def _disk(output: Sequence[str]) -> Diagnosis | None:
    evidence = _evidence(output, "no space left on device")
    if evidence is None:
        return None
    return Diagnosis(
        "disk",
        "disk full",
        f"The disk is full: `{usage.DISK}` shows what the engine holds on its data root and the engine's own commands "
        "that give space back (`docker image prune`, `docker builder prune`); then rerun.",
        evidence=evidence,
    )


_LOST_LAYER = re.compile(r"failed to prepare sha256:[0-9a-f]+ as \S+: open \S*/\.tmp-committed\d*: no such file")


def _lost_layer(output: Sequence[str]) -> Diagnosis | None:
    """The engine's builder still maps a layer to an overlay2 folder that is gone (a removed image or a deleted
    folder): only a restart of dockerd makes it read the layer store again (moby/buildkit#5469; seen here after
    `docker image rm` of a cell and a rebuild that made the same layers, 2026-11-30)."""
    if not any(_LOST_LAYER.search(line) for line in output):
        return None
    return Diagnosis(
        "engine",
        "engine lost a layer",
        "The engine's builder holds a layer whose folder is gone (moby/buildkit#5469), so every build on that layer "
        "fails the same way until dockerd restarts: `systemctl restart docker`, or, for the engine "
        f"`{ENGINE_SCRIPT}` started, `pkill dockerd` and then `bash {ENGINE_SCRIPT}`; then rerun. Images and the build "
        "cache are kept.",
        evidence=_evidence(output, ".tmp-committed"),
    )


def _evidence(lines: Iterable[str], needle: str) -> str | None:
    """The last line that says `needle` (any case), shortened; None when none does."""
    found = [line for line in lines if needle.lower() in line.lower()]
    return _shorten(_PREFIX.sub("", found[-1].strip())) if found else None


# --- the base image --------------------------------------------------------------------------------------------------

_SOURCE_METADATA = re.compile(
    r"failed to solve: (?P<ref>\S+?): failed to resolve source metadata for \S+?: (?P<why>.*)$"
)
_FROM_STEP = re.compile(r"^\[(?:internal\] load metadata for|[^\]]*\] FROM) (?P<ref>\S+)")
_PULL_DENIED = re.compile(r"pull access denied for (?P<ref>[^,\s]+)")
_URL_HOST = re.compile(r"(?:https?)://(?P<host>[^/\s\"]+)")
_LOOKUP = re.compile(r"lookup (?P<host>\S+?)(?: on \S+)?: no such host")


def _base_failure(step: _Step, attempt: Attempt, remedies: Remedies) -> Diagnosis | None:
    ref = why = None
    for line in step.lines:
        if found := _SOURCE_METADATA.search(line):
            ref, why = found.group("ref"), found.group("why")
    if ref is None and (header := _FROM_STEP.match(step.header)):
        error = next((line for line in step.lines if line.startswith("ERROR:")), None)
        if error is not None:
            ref, why = header.group("ref"), error.removeprefix("ERROR:").strip()
    if ref is None and (denied := _PULL_DENIED.search(step.text)):
        ref, why = denied.group("ref"), denied.group(0)
    if ref is None or why is None:
        return None
    return base_not_pullable(ref, why, attempt, remedies)


def base_not_pullable(ref: str, error: str, attempt: Attempt, remedies: Remedies) -> Diagnosis:
    """A base that cannot be pulled: which, from where (the registry the `error` names) and the three ways out: a
    profile's registry mirror, a registry of one's own (`invoke bases.mirror`, then --base-registry), a cell on the
    offline base. `ref` is the name that was pulled; `attempt.base_image` too, when it came through a mirror."""
    host = _base_host(ref, error)
    said, trouble = _reason(error)
    lines = _base_advice(ref, host, said, trouble, attempt, remedies)
    return Diagnosis("base", f"base image not pullable ({host})", "\n".join(lines), host, ref, _shorten(error))


def _base_host(ref: str, why: str) -> str:
    """The registry the engine asked, as its error names it: the URL it requested, the name it looked up, else the
    registry part of the reference (Docker Hub for a name without one)."""
    if found := _URL_HOST.search(why):
        return found.group("host")
    if found := _LOOKUP.search(why):
        return found.group("host")
    return _registry(ref) or "docker.io"


def _registry(ref: str) -> str | None:
    first, slash, _ = ref.partition("/")
    return first if slash and ("." in first or ":" in first or first == "localhost") else None


def _name(ref: str) -> str:
    return ref.split("@", 1)[0]


def _base_registry(attempt: Attempt) -> str | None:
    """The registry prefix the build took its base through (--base-registry or a profile's `bases`), read off
    BASE_IMAGE: PREFIX/<the base's Docker Hub path>; None when it pulled the base by its own name."""
    if attempt.cell is None or attempt.base_image is None:
        return None
    pulled, base = _name(attempt.base_image), _name(attempt.cell.base_image)
    if pulled == base:
        return None
    hub_path = base if "/" in base else f"library/{base}"  # Docker Hub's path for an official image
    for path in dict.fromkeys((hub_path, base)):
        if pulled.endswith("/" + path):
            return pulled[: -len(path) - 1]
    return _registry(pulled)


Route = Literal["upstream", "profile", "own"]  # how the build asked for its base


def _base_advice(ref: str, host: str, said: str, trouble: Trouble, attempt: Attempt, remedies: Remedies) -> list[str]:
    cell = attempt.cell
    prefix = _base_registry(attempt)
    mirrors = {name: (registry, limits) for name, registry, limits in remedies.base_mirrors}
    route: Route = (
        "upstream" if prefix is None else "profile" if mirrors.get(attempt.profile, ("",))[0] == prefix else "own"
    )
    base = cell.base_image if cell is not None else ref
    if route == "own":
        lines = [
            f"The base image {base} cannot be pulled from the registry at {host} (--base-registry {prefix}), "
            f"as {ref}: {said}."
        ]
    elif route == "profile":
        lines = [
            f"The base image {base} cannot be pulled through mirror profile {attempt.profile}'s registry "
            f"mirror {prefix}, as {ref}: {host}: {said}."
        ]
    else:
        lines = [f"The base image {ref} cannot be pulled from {host}: {said}."]
    ways = [
        _own_registry_way(route, prefix, host, trouble, ref),
        _profile_way(route, remedies, attempt, prefix, host, trouble),
        _offline_way(route, remedies, cell),
    ]
    if cell is not None and cell.bootstrap_base and route != "own":
        ways.insert(0, ways.pop())  # its base is made here: that is the way out, not a registry
    elif route != "own":
        ways.insert(0, ways.pop(1))  # a (another) profile is the quickest
    return [*lines, "Ways out:", *(f"  - {way}" for way in ways)]


def _own_registry_way(route: Route, prefix: str | None, host: str, trouble: Trouble, ref: str) -> str:
    """A registry of one's own: how to fill it, or what is wrong with the one the build used."""
    if route != "own" or prefix is None:
        return (
            f"a registry of your own: `{MIRROR_BASES} --to HOST[/PREFIX]` once, where upstream is reachable (it "
            "copies every base there), then build with --base-registry HOST[/PREFIX]"
        )
    registry = prefix.split("/", 1)[0]
    copy = f"`{MIRROR_BASES} --to {prefix}` copies every base there (once, where upstream is reachable)"
    if trouble == "missing":
        return f"the registry at {host} has no {ref}: {copy}"
    if trouble == "auth":
        return f"the registry at {host} wants credentials: `docker login {registry}`; if it lacks the bases, {copy}"
    if trouble == "tls":
        return (
            f"the engine does not trust {host}'s certificate: put its CA in /etc/docker/certs.d/{registry}/ca.crt; "
            f"if it lacks the bases, {copy}"
        )
    if trouble == "http":
        return f"{host} serves plain HTTP: add it to dockerd's insecure-registries; if it lacks the bases, {copy}"
    return (
        f"check that the registry at {host} runs and that this machine reaches it; then, if it lacks the bases, {copy}"
    )


def _profile_way(
    route: Route, remedies: Remedies, attempt: Attempt, prefix: str | None, host: str, trouble: Trouble
) -> str:
    """A mirror profile that takes the bases through a registry mirror (another one, when the build used one)."""
    said = "a mirror profile that takes the bases through a registry mirror"
    names = [name for name, _, _ in remedies.base_mirrors]
    if not names:
        way = f"{said}: --mirror NAME, a profile with `bases` in matrix.yaml's `mirrors:`"
    elif route == "profile":
        limits = next((limits for name, _, limits in remedies.base_mirrors if name == attempt.profile), "")
        others = [name for name, registry, _ in remedies.base_mirrors if registry != prefix]
        way = f"this build used {attempt.profile}'s registry mirror {host}"
        if limits and trouble in ("missing", "auth", "rate"):
            way += f" ({limits})"
        way += f"; another: --mirror {_either(others)}" if others else " (every profile with bases uses it)"
    else:
        only = f" ({', '.join(remedies.bases_only)} changes only the bases)" if remedies.bases_only else ""
        way = f"{said}: --mirror {_either(names)}{only}"
        if attempt.cell is not None and attempt.cell.bootstrap_base:
            pulled = ", ".join(
                dict.fromkeys(split_tag(_name(c.base_image))[0] for c in remedies.cells if not c.bootstrap_base)
            )
            way = (
                f"cells on registry bases ({pulled or 'ubuntu, nvidia/cuda'}) can take them through a mirror profile's "
                f"registry mirror: --mirror {_either(names)}{only}; this cell's base is made here, never pulled"
            )
        elif route == "own":
            way += ", without --base-registry"
    return way


def _offline_way(route: Route, remedies: Remedies, cell: Cell | None) -> str:
    """A cell on the offline base, which needs no registry at all."""
    said = f"the offline base, which `{usage.BASE}` makes here from an apt mirror with no registry"
    if cell is not None and cell.bootstrap_base:
        without = " without --base-registry" if route == "own" else ""
        return f"{said}: this cell is on it; run `{usage.BASE}`, then `{usage.BUILD} {flags_for(cell)}`{without}"
    offline = offline_cell(remedies.cells, cell)
    if offline is None:
        return f"a cell on {said} (`{usage.MATRIX}` lists them: Python 3.11)"
    return f"a cell on {said}: `{usage.BUILD} {flags_for(offline)}`"


def offline_cell(cells: Sequence[Cell], like: Cell | None = None) -> Cell | None:
    """A cell on the base made here (`invoke base`): the same framework and flavor as `like` where there is one
    (else the first framework the matrix lists), then the newest release."""
    framework = like.framework if like is not None else next((cell.framework for cell in cells), None)
    offline = [cell for cell in cells if cell.bootstrap_base]

    def closeness(cell: Cell) -> tuple[bool, bool, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        flavor = like is not None and cell.flavor == like.flavor
        newest = version_key(cell.framework_version), version_key(cell.python), version_key(cell.cuda)
        return (cell.framework == framework, flavor, *newest)

    return max(offline, key=closeness, default=None)


# --- pip and apt: which host did not answer --------------------------------------------------------------------------

_PIP_RETRY = re.compile(r"WARNING: Retrying \(Retry\(.*?\)\) after connection broken by '(?P<why>.*)': (?P<path>/\S*)$")
_PIP_FETCH = re.compile(r"Could not fetch URL (?P<url>https?://\S+?): (?P<why>.*)$")
_PIP_HTTP = re.compile(r"HTTP error (?P<code>\d+) while getting (?P<url>https?://\S+)")
_PIP_POOL = re.compile(r"HTTPS?ConnectionPool\(host='(?P<host>[^']+)', port=(?P<port>\d+)\)")
_PIP_OSERROR = re.compile(r"ERROR: Could not install packages due to an OSError: (?P<why>.*)$")
_PIP_CONNECT_TO = re.compile(r"Connection to (?P<host>\S+?) timed out")
_LOOKING_IN = re.compile(r"^Looking in (?:indexes|links): (?P<urls>.*)$")
_APT_FETCH = re.compile(r"^[WE]: Failed to fetch (?P<url>https?://\S+)\s+(?P<why>.*)$")
_APT_ERR = re.compile(r"^Err:\d+ (?P<url>https?://\S+)")


@dataclass(frozen=True)
class _Event:
    """One failed request in the failed step: by pip or apt, to which host (and URL, when known), and why."""

    tool: Literal["pip", "apt"]
    host: str
    url: str | None
    why: str
    line: str


def _network_events(step: _Step, attempt: Attempt) -> list[_Event]:
    indexes = _pip_urls(step, attempt)
    events: list[_Event] = []
    lines = step.lines
    for number, line in enumerate(lines):
        text = line.strip()
        if found := _PIP_RETRY.search(text):
            url = _url_for(found.group("path"), indexes)
            host = _pip_host(found.group("why")) or (_netloc(url) if url else "the pip index")
            events.append(_Event("pip", host, url, found.group("why"), text))
        elif found := _PIP_FETCH.search(text):
            events.append(_Event("pip", _netloc(found.group("url")), found.group("url"), found.group("why"), text))
        elif found := _PIP_HTTP.search(text):
            events.append(_Event("pip", _netloc(found.group("url")), found.group("url"), found.group(0), text))
        elif (found := _PIP_OSERROR.search(text)) and (named := _pip_host(found.group("why"))):
            events.append(_Event("pip", named, None, found.group("why"), text))
        elif found := _APT_FETCH.search(text):
            events.append(_Event("apt", _netloc(found.group("url")), found.group("url"), found.group("why"), text))
        elif (found := _APT_ERR.search(text)) and number + 1 < len(lines):
            why = lines[number + 1].strip()
            events.append(_Event("apt", _netloc(found.group("url")), found.group("url"), why, f"{text} {why}"))
    return events


def _pip_host(why: str) -> str | None:
    """The host a pip/urllib3 message names: HTTPSConnectionPool(host='H', port=P) or "Connection to H timed out"."""
    if found := _PIP_POOL.search(why):
        port = found.group("port")
        return found.group("host") if port in ("443", "80") else f"{found.group('host')}:{port}"
    if found := _PIP_CONNECT_TO.search(why):
        return found.group("host")
    return None


def _pip_urls(step: _Step, attempt: Attempt) -> list[str]:
    """The indexes and find-links pages pip was looking in: what it printed ("Looking in indexes: ..."), and what the
    build gave it; PyPI's own index when it printed no index (it does not print its default)."""
    printed: list[str] = []
    for line in step.lines:
        if found := _LOOKING_IN.match(line.strip()):
            printed += [url.strip() for url in found.group("urls").split(",") if url.strip()]
    given = [attempt.torch_index, attempt.torch_find_links, attempt.pip_index]
    if attempt.cell is not None:
        given += [attempt.cell.install.index_url, attempt.cell.install.find_links]
    printed_index = any("indexes" in line for line in step.lines if _LOOKING_IN.match(line.strip()))
    default = [] if printed_index or PYPI_INDEX is None else [PYPI_INDEX]
    return list(dict.fromkeys([*printed, *default, *(url for url in given if url)]))


def _url_for(path: str, urls: Sequence[str]) -> str | None:
    """The index or find-links page a request path belongs to: the one whose path is the longest prefix of it."""
    best: tuple[int, str] | None = None
    for url in urls:
        base = urlsplit(url).path
        base = base.rsplit("/", 1)[0] if base.endswith(".html") else base.rstrip("/")
        if (path == base or path.startswith(base + "/")) and (best is None or len(base) > best[0]):
            best = (len(base), url)
    return best[1] if best else None


def _is_torch(event: _Event, attempt: Attempt) -> bool:
    """Whether the failed request went to PyTorch's wheel index, its find-links page, or a mirror of them."""
    torch_urls = [attempt.torch_index, attempt.torch_find_links]
    if attempt.cell is not None:
        torch_urls += [attempt.cell.install.index_url, attempt.cell.install.find_links]
    if event.url is not None and any(url and _same_place(event.url, url) for url in torch_urls):
        return True
    return "pytorch" in (event.url or event.host).lower()


def _same_place(url: str, other: str) -> bool:
    path = urlsplit(other).path
    path = path.rsplit("/", 1)[0] if path.endswith(".html") else path.rstrip("/")
    return _netloc(url) == _netloc(other) and urlsplit(url).path.startswith(path)


# --- pip and apt: the advice -----------------------------------------------------------------------------------------


def _network_failure(events: Sequence[_Event], attempt: Attempt, remedies: Remedies) -> Diagnosis:
    first = events[0]
    said, trouble = _reason(first.why)
    others = list(dict.fromkeys(e.host for e in events if e.host != first.host))
    also = [f"  (also failed: {', '.join(others)})"] if others else []
    evidence = _shorten(first.line)
    if first.tool == "apt":
        lines = _apt_advice(first, said, attempt, remedies)
        return Diagnosis(
            "apt", f"apt mirror unreachable ({first.host})", "\n".join(lines + also), first.host, None, evidence
        )
    if _is_torch(first, attempt):
        lines = _torch_advice(first, said, trouble, attempt, remedies)
        summary = f"PyTorch index unreachable ({first.host})"
        return Diagnosis("pytorch-index", summary, "\n".join(lines + also), first.host, None, evidence)
    lines = _pypi_advice(first, said, trouble, attempt, remedies)
    summary = f"PyPI {'not trusted' if trouble == 'tls' else 'unreachable'} ({first.host})"
    return Diagnosis("pypi", summary, "\n".join(lines + also), first.host, None, evidence)


def _profiles_way(what: str, profiles: Sequence[str], used: str) -> str:
    """The mirror profiles that mirror `what` ("PyPI"), or the others when the build used one of them."""
    if not profiles:
        return f"a mirror profile that mirrors {what}: --mirror NAME (matrix.yaml `mirrors:`)"
    if used in profiles:
        others = [name for name in profiles if name != used]
        said = f"this build used {used}'s mirror of {what}"
        return f"{said}; another: --mirror {_either(others)}" if others else f"{said}; --mirror none goes upstream"
    return f"mirror profiles that mirror {what}: --mirror {_either(profiles)}"


def _pypi_advice(event: _Event, said: str, trouble: Trouble, attempt: Attempt, remedies: Remedies) -> list[str]:
    where = f" ({event.url})" if event.url and _netloc(event.url) == event.host else ""
    lines = [f"pip could not reach the package index at {event.host}{where}: {said}.", "Ways out:"]
    if trouble == "tls":
        lines.append(
            "  - behind a TLS-intercepting proxy, give pip the proxy's CA: --ca-bundle /path/ca.pem (a BuildKit "
            "secret; this host's bundle is the default)"
        )
    if trouble == "auth":
        lines.append("  - a private index's credentials: --netrc FILE (a BuildKit secret)")
    lines.append("  - " + _profiles_way("PyPI", remedies.pypi, attempt.profile))
    return lines


def _apt_advice(event: _Event, said: str, attempt: Attempt, remedies: Remedies) -> list[str]:
    cell = attempt.cell
    lines = [f"apt could not reach the mirror at {event.host}: {said}; so apt-get found no packages.", "Ways out:"]
    if "nvidia" in event.host:
        lines.append(
            "  - no profile mirrors NVIDIA's CUDA apt repository: a cell whose CUDA comes from the framework's wheels "
            f"does not use it (`{usage.MATRIX}` shows `cuda from`)"
        )
    lines.append("  - " + _profiles_way("the apt archives", remedies.apt, attempt.profile))
    if cell is not None and cell.os_family != "debian":
        lines.append(f"  - (--mirror {HOST_PROFILE}, this machine's own Debian mirror, serves Debian cells only)")
    elif attempt.profile != HOST_PROFILE:
        lines.append(f"  - --mirror {HOST_PROFILE}: this machine's own Debian mirror (Debian-based cells only)")
    return lines


def _torch_advice(event: _Event, said: str, trouble: Trouble, attempt: Attempt, remedies: Remedies) -> list[str]:
    cell = attempt.cell
    build = f" for the {cell.install.variant_tag} build of PyTorch {cell.framework_version}" if cell else ""
    where = f" ({event.url})" if event.url else ""
    lines = [f"pip could not reach PyTorch's wheel index at {event.host}{where}{build}: {said}.", "Ways out:"]
    if trouble == "tls":
        lines.append("  - behind a TLS-intercepting proxy, give pip the proxy's CA: --ca-bundle /path/ca.pem")
    lines.append("  - " + _profiles_way("PyTorch's CUDA wheels", remedies.pytorch_wheels, attempt.profile))
    wheel_cells = [c for c in remedies.cells if _on_pypi_wheels(c)]
    instead = max(wheel_cells, key=lambda c: _wheel_closeness(c, cell), default=None)
    if instead is not None:
        cudas = ", ".join(sorted({c.cuda for c in wheel_cells}, key=version_key))
        lines.append(
            f"  - cells on PyPI's wheels need no PyTorch index (the CUDA {cudas} PyTorch cells): "
            f"`{usage.BUILD} {flags_for(instead)}`"
        )
    else:
        lines.append(f"  - cells on PyPI's wheels need no PyTorch index (`{usage.MATRIX}` shows them)")
    return lines


def _on_pypi_wheels(cell: Cell) -> bool:
    install = cell.install
    return cell.framework == "pytorch" and not (install.index_url or install.find_links or install.variant_tag)


def _wheel_closeness(cell: Cell, like: Cell | None) -> tuple[bool, bool, tuple[int, ...], tuple[int, ...]]:
    python = like is not None and cell.python == like.python
    flavor = like is not None and cell.flavor == like.flavor
    return python, flavor, version_key(cell.framework_version), version_key(cell.cuda)


# --- what pip or the build says outright -----------------------------------------------------------------------------

# (what the output says, the kind, its summary, the advice); matched in order, any case.
_LOCK_FAILURES: tuple[tuple[str, Kind, str, str], ...] = (
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
_OTHER_FAILURES: tuple[tuple[str, Kind, str, str], ...] = (
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


def _known(text: str, table: Sequence[tuple[str, Kind, str, str]]) -> Diagnosis | None:
    lowered = text.lower()
    for needle, kind, summary, advice in table:
        if needle.lower() in lowered:
            return Diagnosis(kind, summary, advice, evidence=_evidence(text.splitlines(), needle))
    return None


# `pip check`'s two complaints (pip/_internal/commands/check.py), one line per requirement that does not hold.
_PIP_CHECK = re.compile(
    r"^(?P<who>\S+) (?P<version>\S+) (?:has requirement (?P<wanted>.+), but you have (?P<have>\S+ \S+)"
    r"|requires (?P<missing>\S+), which is not installed)\.$"
)
MAX_CONFLICTS_SHOWN = 8


def _pip_check_failure(step: _Step, attempt: Attempt) -> Diagnosis | None:
    """`pip check` failed: every requirement the installed packages do not meet, in pip's words, and how to get a set
    that fits (re-lock; or, for a cell without a lock, the pin in matrix.yaml)."""
    found = [(m, text) for line in step.lines if (m := _PIP_CHECK.match(text := _PREFIX.sub("", line.strip())))]
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
        f"pip check: {first.group('who')} needs {_shorten(needed, 40)}"
        if len(said) == 1
        else f"pip check: {len(said)} unmet requirements"
    )
    return Diagnosis("pip-check", summary, "\n".join(lines), evidence=_shorten(said[0]))


_FROM_URL = re.compile(r"\bfrom (?P<url>https?://\S+)")


def _with_hash_host(found: Diagnosis, step: _Step) -> Diagnosis:
    """A hash mismatch names the host that served the file (pip prints "NAME==V from URL")."""
    if found.kind != "hash" or not (url := _FROM_URL.search(step.text)):
        return found
    host = _netloc(url.group("url"))
    advice = found.advice.replace("the index or mirror serves", f"{host} serves", 1)
    return Diagnosis(found.kind, f"{found.summary} ({host})", advice, host, None, found.evidence)


def _with_index(found: Diagnosis, step: _Step) -> Diagnosis:
    """A version that is not there: on which index pip looked."""
    if found.kind != "pin":
        return found
    urls = [url for line in step.lines if (m := _LOOKING_IN.match(line.strip())) for url in m.group("urls").split(",")]
    where = ", ".join(url.strip() for url in urls) or PYPI_INDEX or "PyPI (pip's default index)"
    return Diagnosis(found.kind, found.summary, f"{found.advice} pip looked in: {where}.", None, None, found.evidence)


def _unknown(step: _Step) -> Diagnosis:
    """No known cause: the step that failed, its exit code and its last lines, quoted."""
    code = step.exit_code
    summary = f"build failed (exit code {code})" if code else "build failed"
    if not step.buildkit:
        last = next((line for line in reversed(step.lines) if line), "no output")
        return Diagnosis("unknown", summary, f"the build failed: {_shorten(last, 300)}", evidence=_shorten(last))
    own = [line for line in step.lines if line and not line.startswith(("ERROR:", "DONE", "CACHED"))]
    error = next((line for line in step.lines if line.startswith("ERROR:")), "")
    where = f" in step {_step_name(step.header)}" if step.header else ""
    lines = [f"The build failed{where}" + (f" (exit code {code})" if code else "") + "; its last lines:"]
    lines += [f"    {_shorten(line, 200)}" for line in own[-3:]] or [f"    {_shorten(error, 200)}"]
    return Diagnosis("unknown", summary, "\n".join(lines), evidence=_shorten(own[-1] if own else error))
