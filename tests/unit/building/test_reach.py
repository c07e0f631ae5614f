"""`invoke matrix --here`: the probe against HTTP servers on 127.0.0.1 (answering, failing, silent, absent), and the
cells kept for what answered, with a fake probe (no network)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from dlimages.building.advice import reach
from dlimages.building.advice.reach import Answer
from dlimages.model.cells import BASE, HUB, PYPI, Expansion

PYPI_URL = "https://pypi.example.org/simple/"
TORCH_HOST = "https://download.pytorch.org"  # where the fixture matrix's PyTorch indexes and find-links page are


class _Status(http.server.BaseHTTPRequestHandler):
    """Answers HEAD with the status its path names (/401/v2/ -> 401), or stays silent on /silent."""

    def do_HEAD(self) -> None:
        if self.path.startswith("/silent"):
            time.sleep(5)
            return
        self.send_response(int(self.path.split("/")[1]))
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_any_answer_below_500_counts_and_a_server_error_does_not(server: str) -> None:
    found = reach.probe([f"{server}/200/simple/"], timeout=2)
    assert found == {server: Answer(True, "HTTP 200")}
    assert reach.probe([f"{server}/401/v2/"], timeout=2)[server] == Answer(True, "HTTP 401")  # a registry: it is there
    assert reach.probe([f"{server}/404/x"], timeout=2)[server].ok
    assert reach.probe([f"{server}/503/x"], timeout=2)[server] == Answer(False, "HTTP 503")


def test_a_host_is_asked_once_by_the_first_url_named_on_it(server: str) -> None:
    assert reach.probe([f"{server}/200/a", f"{server}/503/b"], timeout=2) == {server: Answer(True, "HTTP 200")}


def test_a_refused_connection_and_a_silent_server_are_no_answer_within_the_timeout(server: str) -> None:
    closed = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    found = reach.probe([f"{closed}/v2/", f"{server}/silent", f"{server.replace('127.0.0.1', 'localhost')}/200/"], 1)
    took = time.monotonic() - start
    assert found[closed] == Answer(False, "connection refused")
    assert not found[server].ok and ("timed out" in found[server].said or "no answer" in found[server].said)
    assert found[server.replace("127.0.0.1", "localhost")].ok  # all asked at once: the silent one holds up none
    assert took < 2.5, f"the probe took {took:.1f} s"


def test_only_http_urls_are_asked() -> None:
    assert reach.probe(["file:///etc/passwd"], timeout=1) == {"file://": Answer(False, "not an http(s) URL")}


def test_the_registry_asked_is_docker_hubs_or_the_one_given() -> None:
    assert reach.registry_api(None) == reach.DOCKER_HUB_API
    assert reach.registry_api("registry.example.org/mirror") == "https://registry.example.org/v2/"
    assert reach.registry_api("127.0.0.1:5000/mirror") == "http://127.0.0.1:5000/v2/"  # dockerd: loopback is HTTP


def test_pip_index_is_read_from_pips_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = https://pypi.example.org/simple/\n", encoding="utf-8")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    assert reach.pip_index() == ("https://pypi.example.org/simple/", "pip's configuration")
    monkeypatch.setenv("PIP_INDEX_URL", "https://other.example.org/simple/")
    assert reach.pip_index() == ("https://other.example.org/simple/", "pip's configuration")


class _Fake:
    """A probe under which the hosts in `answering` answer and every other is silent; it keeps what it was asked."""

    def __init__(self, answering: set[str]) -> None:
        self.answering = tuple(answering)
        self.asked: list[str] = []

    def __call__(self, urls: Sequence[str]) -> Mapping[str, Answer]:
        self.asked += urls
        return {reach.origin(url): Answer(url.startswith(self.answering), "fake") for url in urls}


def test_only_the_cells_whose_needs_answer_are_kept(expansion: Expansion) -> None:
    cells = expansion.cells
    found = reach.here(cells, pypi=(PYPI_URL, "pip's configuration"), ask=_Fake({PYPI_URL}))
    assert found.cells and all(set(c.needs) == {BASE, PYPI} for c in found.cells)
    assert {c.slug for c in found.cells} == {c.slug for c in cells if set(c.needs) == {BASE, PYPI}}
    said = "\n".join(found.lines)
    assert f"Docker Hub at {reach.DOCKER_HUB_API}: NO answer (fake)" in said
    assert f"PyPI (pip's configuration) at {PYPI_URL}: answers (fake)" in said
    assert "the offline Debian base (`invoke base`): made here from this host's apt mirror, not asked" in said
    assert f"{len(found.cells)} of {len(cells)} cells build with what answers here." in said
    assert "--base-registry" in said  # what stands in for Docker Hub


def test_each_host_is_asked_once_and_the_offline_base_never(expansion: Expansion) -> None:
    ask = _Fake({PYPI_URL, reach.DOCKER_HUB_API, TORCH_HOST})
    found = reach.here(expansion.cells, pypi=(PYPI_URL, "pip's default"), ask=ask)
    assert found.cells == expansion.cells  # everything answers
    asked = {reach.origin(url) for url in ask.asked}
    assert asked == {reach.origin(PYPI_URL), reach.origin(reach.DOCKER_HUB_API), TORCH_HOST}


def test_a_base_registry_stands_in_for_docker_hub(expansion: Expansion) -> None:
    ask = _Fake({PYPI_URL, "http://127.0.0.1:5000/"})
    found = reach.here(expansion.cells, base_registry="127.0.0.1:5000/m", pypi=(PYPI_URL, "pip's default"), ask=ask)
    assert {tuple(c.needs) for c in found.cells} == {(HUB, PYPI), (BASE, PYPI)}
    assert "--base-registry 127.0.0.1:5000/m (for Docker Hub's bases) at http://127.0.0.1:5000/v2/: answers" in (
        "\n".join(found.lines)
    )


def test_without_pip_no_cell_is_kept(expansion: Expansion) -> None:
    found = reach.here(expansion.cells, pypi=(None, "no pip to ask"), ask=_Fake(set()))
    assert found.cells == ()
    assert "PyPI (no pip to ask): nothing to ask (no pip)" in "\n".join(found.lines)
