"""Which sources a build needs answer from this machine (`invoke matrix --here`): the registry the bases come from
(Docker Hub, or a registry given in its place as `--base-registry`), the framework's own wheel index, PyPI as pip is
configured here. The one module of the advice package that asks the network: one HEAD request per host, all at once,
a few seconds at most in all; any HTTP answer below 500 counts (a registry's 401 says it is there)."""

from __future__ import annotations

import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from dlimages.building.advice.network import PYPI_INDEX
from dlimages.building.advice.reading import reason
from dlimages.core import usage
from dlimages.core.references import registry_is_loopback
from dlimages.model.cells import BASE, HUB, INDEX_SUFFIX, PYPI, Cell, need_words

PROBE_TIMEOUT_S = 3.0  # one request; all of them run at once, so this is about the whole wait too
# Docker Hub's registry API, where `docker pull ubuntu:22.04` goes (a 401 without a token: it answers).
DOCKER_HUB_API = "https://registry-1.docker.io/v2/"


@dataclass(frozen=True)
class Answer:
    """What one host said: whether it answers, and in words ("HTTP 401", "the name does not resolve")."""

    ok: bool
    said: str


Probe = Callable[[Sequence[str]], Mapping[str, Answer]]  # URLs in, each URL's host's answer out (by `origin`)


def origin(url: str) -> str:
    """scheme://host[:port]: what one request stands for (every index on PyTorch's host answers as one)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def registry_api(base_registry: str | None) -> str:
    """The registry API the bases come from: Docker Hub's, or `--base-registry HOST[:PORT][/PATH]`'s (plain HTTP on
    this machine's loopback, as dockerd treats it by default)."""
    if base_registry is None:
        return DOCKER_HUB_API
    host = base_registry.split("/", 1)[0]
    return f"{'http' if registry_is_loopback(f'{host}/x') else 'https'}://{host}/v2/"


def pip_index() -> tuple[str | None, str]:
    """The index pip installs from on this machine and where that was read: PIP_INDEX_URL or pip's configuration
    files (`pip config list`), else pip's own default; (None, why) without pip."""
    try:
        from pip._internal.configuration import Configuration

        configuration = Configuration(isolated=False)
        configuration.load()
        values = dict(configuration.items())
    except Exception:  # an unreadable configuration: pip's default, as pip would take it
        values = {}
    for key in (":env:.index-url", "install.index-url", "global.index-url"):
        value = values.get(key)
        if isinstance(value, str) and value.split():
            return value.split()[0], "pip's configuration"
    return PYPI_INDEX, "pip's default" if PYPI_INDEX else "no pip to ask"


def place(cell: Cell, need: str, *, registry: str, pypi: str | None) -> str | None:
    """The URL that answers for one of the cell's needs (None: nothing to ask, the base made here, or no PyPI)."""
    if need == BASE:
        return None
    if need == PYPI:
        return pypi
    if need.endswith(INDEX_SUFFIX):
        return cell.install.index_url or cell.install.find_links
    return registry if need == HUB else f"https://{need}/v2/"


def probe(urls: Sequence[str], timeout: float = PROBE_TIMEOUT_S, cafile: str | None = None) -> dict[str, Answer]:
    """Ask each host once (the first URL named on it), all at once, and give up on every one still silent after
    `timeout` (name lookups included): the threads are daemons, left to finish on their own."""
    context = ssl.create_default_context(cafile=cafile)
    asked = {origin(url): url for url in reversed(urls)}  # the first URL of each host wins
    found: dict[str, Answer] = {}

    def ask(key: str, url: str) -> None:
        found[key] = _head(url, timeout, context)

    threads = [threading.Thread(target=ask, args=item, daemon=True) for item in asked.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout + 0.5
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    silent = Answer(False, f"no answer in {timeout:g} s")
    return {key: found.get(key, silent) for key in asked}


def _head(url: str, timeout: float, context: ssl.SSLContext) -> Answer:
    if urlsplit(url).scheme not in ("http", "https"):
        return Answer(False, "not an http(s) URL")
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "dlimages-probe"})  # noqa: S310
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as error:
        status = error.code
    except (urllib.error.URLError, OSError, ValueError) as error:
        why = getattr(error, "reason", error)
        return Answer(False, reason(str(why))[0] if str(why) else type(why).__name__)
    return Answer(status < 500, f"HTTP {status}")


@dataclass(frozen=True)
class Here:
    """The cells whose every need answered, and what was found, a line each (for stderr)."""

    cells: tuple[Cell, ...]
    lines: tuple[str, ...]


def here(
    cells: Iterable[Cell],
    *,
    base_registry: str | None = None,
    pypi: tuple[str | None, str] | None = None,
    ask: Probe | None = None,
) -> Here:
    """Ask every place the cells' needs name (`ask`: `probe`, or a fake), and keep the cells whose needs all
    answered; the offline base is made here (`invoke base`, from this host's apt mirror), never asked."""
    cells = tuple(cells)
    registry = registry_api(base_registry)
    index, read_from = pypi or pip_index()
    places = {(c.slug, need): place(c, need, registry=registry, pypi=index) for c in cells for need in c.needs}
    urls = list(dict.fromkeys(url for url in places.values() if url is not None))
    answers = (ask or probe)(urls)
    lines: list[str] = []
    shown: set[str] = set()
    for (_, need), url in places.items():
        key = need if url is None else origin(url)
        if key in shown:
            continue
        shown.add(key)
        title = _title(need, base_registry, read_from)
        if url is None:
            said = "made here from this host's apt mirror, not asked" if need == BASE else "nothing to ask (no pip)"
            lines.append(f"{title}: {said}")
        else:
            answer = answers.get(origin(url), Answer(False, "not asked"))
            lines.append(f"{title} at {url}: {'answers' if answer.ok else 'NO answer'} ({answer.said})")
    kept = tuple(c for c in cells if all(_met(places[c.slug, need], answers) for need in c.needs if need != BASE))
    lines.append(f"{len(kept)} of {len(cells)} cells build with what answers here.")
    if base_registry is None:
        lines.append(
            f"A registry holding the bases (`{usage.BASES_MIRROR}` copies them) stands in for Docker Hub: "
            f"`{usage.MATRIX} --here --base-registry HOST[/PATH]`, then the same flag on `{usage.BUILD}`."
        )
    return Here(kept, tuple(lines))


def _met(url: str | None, answers: Mapping[str, Answer]) -> bool:
    return url is not None and answers.get(origin(url), Answer(False, "")).ok


def _title(need: str, base_registry: str | None, read_from: str) -> str:
    if need == HUB and base_registry is not None:
        return f"--base-registry {base_registry} (for Docker Hub's bases)"
    if need == PYPI:
        return f"PyPI ({read_from})"
    return need_words(need)
