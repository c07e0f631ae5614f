"""JupyterLab as the image starts it by default: answers on its port, demands a token, works in /workspace.

Every request goes to 127.0.0.1 through the standard library, past any proxy the environment names.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # fixtures hand these over; importing conftest at run time is ambiguous under tests/
    from conftest import Docker, Image

pytestmark = pytest.mark.image

PORT = "8888/tcp"
START_LIMIT_S = 60
REQUEST_TIMEOUT_S = 5
FORBIDDEN = (401, 403)
# ProxyHandler({}) ignores http_proxy & co: a proxy must never see the token or answer for the container.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Response:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Server:
    name: str
    base_url: str  # http://127.0.0.1:<published port>
    docker: Docker

    def logs(self) -> str:
        result = self.docker("logs", self.name)
        return result.out + result.err


def get(url: str, headers: dict[str, str] | None = None) -> Response:
    assert url.startswith("http://127.0.0.1:"), url
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - http://127.0.0.1 only
    try:
        with OPENER.open(request, timeout=REQUEST_TIMEOUT_S) as answer:
            return Response(answer.status, answer.read().decode())
    except urllib.error.HTTPError as error:
        return Response(error.code, error.read().decode(errors="replace"))


def wait_until_serving(server: Server) -> None:
    """Until /api/status answers at all (403 included), at most START_LIMIT_S; fail early if the server died."""
    deadline = time.monotonic() + START_LIMIT_S
    while time.monotonic() < deadline:
        try:
            get(f"{server.base_url}/api/status")
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        running = server.docker("inspect", "-f", "{{.State.Running}}", server.name).out.strip()
        assert running == "true", f"JupyterLab exited during start-up:\n{server.logs()[-3000:]}"
        time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {START_LIMIT_S} s:\n{server.logs()[-3000:]}", pytrace=False)


@pytest.fixture(scope="module")
def jupyter_token() -> str:
    return secrets.token_hex(16)


@contextlib.contextmanager
def serving(docker: Docker, image: Image, *env: str) -> Iterator[Server]:
    """The image's default command (JupyterLab), its port published on 127.0.0.1 only; removed afterwards."""
    options = ("-p", f"127.0.0.1::{PORT.split('/')[0]}", *(f"--env={e}" for e in env))
    with docker.started(image.ref, options=options, purpose="jupyter") as name:
        published = docker("port", name, PORT).out.split()
        address = next((a for a in published if a.startswith("127.0.0.1:")), None)
        assert address, f"port {PORT} is not published on 127.0.0.1: {published}"
        server = Server(name, f"http://{address}", docker)
        wait_until_serving(server)
        yield server


@pytest.fixture(scope="module")
def server(docker: Docker, image: Image, jupyter_token: str) -> Iterator[Server]:
    with serving(docker, image, f"JUPYTER_TOKEN={jupyter_token}") as started:
        yield started


def test_status_with_token_in_query(server: Server, jupyter_token: str) -> None:
    answer = get(f"{server.base_url}/api/status?token={jupyter_token}")
    assert answer.status == 200, f"/api/status?token=... answered {answer.status}: {answer.body[:300]}"
    assert "started" in answer.json(), f"/api/status is not Jupyter's status JSON: {answer.body[:300]}"


def test_status_with_token_in_header(server: Server, jupyter_token: str) -> None:
    answer = get(f"{server.base_url}/api/status", {"Authorization": f"token {jupyter_token}"})
    assert answer.status == 200, f"/api/status with the token header answered {answer.status}"
    assert isinstance(answer.json(), dict)


@pytest.mark.parametrize("token", [None, "wrong"], ids=["no-token", "wrong-token"])
def test_status_refused_without_the_token(server: Server, token: str | None) -> None:
    url = f"{server.base_url}/api/status" + (f"?token={token}" if token else "")
    answer = get(url)
    assert answer.status in FORBIDDEN, f"/api/status with {token or 'no'} token answered {answer.status}, not 403"


def test_token_from_the_environment_is_not_logged(server: Server, jupyter_token: str) -> None:
    assert jupyter_token not in server.logs(), "JupyterLab logged the JUPYTER_TOKEN it was given"


def test_root_dir_is_workspace(server: Server, jupyter_token: str) -> None:
    marker = f"dlimages-marker-{secrets.token_hex(4)}.txt"
    host = server.docker.host(server.name)
    host.check_output("touch /workspace/%s", marker)
    answer = get(f"{server.base_url}/api/contents?token={jupyter_token}")
    assert answer.status == 200, f"/api/contents answered {answer.status}"
    names = [entry["name"] for entry in answer.json()["content"]]
    assert marker in names, f"the server's root lists {names}, without /workspace/{marker}: root_dir is not /workspace"


def test_generated_token_is_required_and_logged(docker: Docker, image: Image) -> None:
    """Without JUPYTER_TOKEN the server stays locked: Jupyter makes a token, logs it, and demands it."""
    with serving(docker, image) as server:
        answer = get(f"{server.base_url}/api/status")
        assert answer.status in FORBIDDEN, f"no JUPYTER_TOKEN and no token sent: /api/status answered {answer.status}"
        found = re.findall(r"[?&]token=([0-9a-f]{32,})", server.logs())
        assert found, f"no generated token in the server log:\n{server.logs()[-2000:]}"
        answer = get(f"{server.base_url}/api/status", {"Authorization": f"token {found[-1]}"})
        assert answer.status == 200, f"the logged token was refused: {answer.status}"
