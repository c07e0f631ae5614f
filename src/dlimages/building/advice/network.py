"""pip or apt could not reach an index or mirror: which host failed (PyPI, PyTorch's wheel index, an apt mirror),
why, and the mirror profiles and cells that avoid it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from dlimages.building.advice.base import also_needs
from dlimages.building.advice.diagnosis import Attempt, Diagnosis, Remedies
from dlimages.building.advice.reading import Step, Trouble, either, netloc, reason, shorten
from dlimages.building.mirrors import HOST_PROFILE
from dlimages.core import usage
from dlimages.model.cells import INDEX_SUFFIX
from dlimages.model.selection import flags_for, nearest_without
from dlimages.model.spec import version_key


def _pip_default_index() -> str | None:
    """pip's default index, which pip does not print, as pip itself names it (None without pip)."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        return None
    return str(PyPI.simple_url)


PYPI_INDEX = _pip_default_index()


# --- which host did not answer ---------------------------------------------------------------------------------------

_PIP_RETRY = re.compile(r"WARNING: Retrying \(Retry\(.*?\)\) after connection broken by '(?P<why>.*)': (?P<path>/\S*)$")
_PIP_FETCH = re.compile(r"Could not fetch URL (?P<url>https?://\S+?): (?P<why>.*)$")
_PIP_HTTP = re.compile(r"HTTP error (?P<code>\d+) while getting (?P<url>https?://\S+)")
_PIP_POOL = re.compile(r"HTTPS?ConnectionPool\(host='(?P<host>[^']+)', port=(?P<port>\d+)\)")
_PIP_OSERROR = re.compile(r"ERROR: Could not install packages due to an OSError: (?P<why>.*)$")
_PIP_CONNECT_TO = re.compile(r"Connection to (?P<host>\S+?) timed out")
LOOKING_IN = re.compile(r"^Looking in (?:indexes|links): (?P<urls>.*)$")
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


def network_events(step: Step, attempt: Attempt) -> list[_Event]:
    indexes = _pip_urls(step, attempt)
    events: list[_Event] = []
    lines = step.lines
    for number, line in enumerate(lines):
        text = line.strip()
        if found := _PIP_RETRY.search(text):
            url = _url_for(found.group("path"), indexes)
            host = _pip_host(found.group("why")) or (netloc(url) if url else "the pip index")
            events.append(_Event("pip", host, url, found.group("why"), text))
        elif found := _PIP_FETCH.search(text):
            events.append(_Event("pip", netloc(found.group("url")), found.group("url"), found.group("why"), text))
        elif found := _PIP_HTTP.search(text):
            events.append(_Event("pip", netloc(found.group("url")), found.group("url"), found.group(0), text))
        elif (found := _PIP_OSERROR.search(text)) and (named := _pip_host(found.group("why"))):
            events.append(_Event("pip", named, None, found.group("why"), text))
        elif found := _APT_FETCH.search(text):
            events.append(_Event("apt", netloc(found.group("url")), found.group("url"), found.group("why"), text))
        elif (found := _APT_ERR.search(text)) and number + 1 < len(lines):
            why = lines[number + 1].strip()
            events.append(_Event("apt", netloc(found.group("url")), found.group("url"), why, f"{text} {why}"))
    return events


def _pip_host(why: str) -> str | None:
    """The host a pip/urllib3 message names: HTTPSConnectionPool(host='H', port=P) or "Connection to H timed out"."""
    if found := _PIP_POOL.search(why):
        port = found.group("port")
        return found.group("host") if port in ("443", "80") else f"{found.group('host')}:{port}"
    if found := _PIP_CONNECT_TO.search(why):
        return found.group("host")
    return None


def _pip_urls(step: Step, attempt: Attempt) -> list[str]:
    """The indexes and find-links pages pip was looking in: what it printed ("Looking in indexes: ..."), and what the
    build gave it; PyPI's own index when it printed no index (it does not print its default)."""
    printed: list[str] = []
    for line in step.lines:
        if found := LOOKING_IN.match(line.strip()):
            printed += [url.strip() for url in found.group("urls").split(",") if url.strip()]
    given = [attempt.torch_index, attempt.torch_find_links, attempt.pip_index]
    if attempt.cell is not None:
        given += [attempt.cell.install.index_url, attempt.cell.install.find_links]
    printed_index = any("indexes" in line for line in step.lines if LOOKING_IN.match(line.strip()))
    default = [] if printed_index or PYPI_INDEX is None else [PYPI_INDEX]
    return list(dict.fromkeys([*printed, *default, *(url for url in given if url)]))


def _index_path(url: str) -> str:
    """The path the requests under an index or find-links page start with: the page's folder, the index's path."""
    path = urlsplit(url).path
    return path.rsplit("/", 1)[0] if path.endswith(".html") else path.rstrip("/")


def _url_for(path: str, urls: Sequence[str]) -> str | None:
    """The index or find-links page a request path belongs to: the one whose path is the longest prefix of it."""
    under = [url for url in urls if path == _index_path(url) or path.startswith(_index_path(url) + "/")]
    return max(under, key=lambda url: len(_index_path(url)), default=None)


def _is_torch(event: _Event, attempt: Attempt) -> bool:
    """Whether the failed request went to PyTorch's wheel index, its find-links page, or a mirror of them."""
    torch_urls = [attempt.torch_index, attempt.torch_find_links]
    if attempt.cell is not None:
        torch_urls += [attempt.cell.install.index_url, attempt.cell.install.find_links]
    if event.url is not None and any(url and _same_place(event.url, url) for url in torch_urls):
        return True
    return "pytorch" in (event.url or event.host).lower()


def _same_place(url: str, other: str) -> bool:
    return netloc(url) == netloc(other) and urlsplit(url).path.startswith(_index_path(other))


# --- the advice ------------------------------------------------------------------------------------------------------


def network_failure(events: Sequence[_Event], attempt: Attempt, remedies: Remedies) -> Diagnosis:
    first = events[0]
    said, trouble = reason(first.why)
    others = list(dict.fromkeys(e.host for e in events if e.host != first.host))
    also = [f"  (also failed: {', '.join(others)})"] if others else []
    evidence = shorten(first.line)
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
        return f"{said}; another: --mirror {either(others)}" if others else f"{said}; --mirror none goes upstream"
    return f"mirror profiles that mirror {what}: --mirror {either(profiles)}"


def _pypi_advice(event: _Event, said: str, trouble: Trouble, attempt: Attempt, remedies: Remedies) -> list[str]:
    where = f" ({event.url})" if event.url and netloc(event.url) == event.host else ""
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
    index = f"pytorch{INDEX_SUFFIX}"
    wheel_cells = [c for c in remedies.cells if c.framework == "pytorch" and index not in c.needs]
    instead = nearest_without(remedies.cells, index, cell, only=lambda c: c.framework == "pytorch")
    if instead is not None:
        cudas = ", ".join(sorted({c.cuda for c in wheel_cells}, key=version_key))
        lines.append(
            f"  - cells on PyPI's wheels need no PyTorch index (the CUDA {cudas} PyTorch cells): "
            f"`{usage.BUILD} {flags_for(instead)}`{also_needs(instead, *(cell.needs if cell else ()))}"
        )
    elif remedies.cells:
        lines.append("  - (no PyTorch cell of matrix.yaml is on PyPI's wheels: each needs PyTorch's index)")
    else:
        lines.append(f"  - cells on PyPI's wheels need no PyTorch index (`{usage.MATRIX}` shows them)")
    return lines
