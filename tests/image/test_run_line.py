"""The `docker run` a build prints, pasted as it is, as the user pastes it: a cache-warm `invoke build` of the image's
own cell prints it; a shell of a real host user (the image's uid 1000, and another uid) runs those lines as written;
headless Chromium opens the URL with the token JupyterLab printed, on 127.0.0.1, and makes and saves a notebook,
which must land in the mounted folder owned by that user. The news and announcements pop-up is off.

Starting the line as two uids needs root (`setpriv`); a docker-group user's run (`.ci/as-user.sh`) reports those
cases skipped, saying so. Port 8888 on 127.0.0.1 is the line's own: the test fails, naming it, when it is taken.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_browser import (  # the browser and the notebook check: test_browser.py's own
    LOAD_TIMEOUT_S,
    RUN_TIMEOUT_S,
    browser,  # noqa: F401 - a fixture
    browser_executables,
    probe,
    run_in_new_notebook,
    save_screenshot,
)
from test_jupyter import Server

if TYPE_CHECKING:
    from conftest import Docker, Image
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[2]
PORT = 8888  # what the printed line publishes
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"
TOKEN_URL = re.compile(r"http://127\.0\.0\.1:8888/lab\?token=([0-9a-f]+)")
BUILD_TIMEOUT_S = 900  # cache-warm here; a cold build of a cell takes about 150 s to 10 min on 2 cores
START_TIMEOUT_S = 180
NOTEBOOK = "pasted-line"
ASK_NAME_S = 10  # how long a first save may take to ask for the name
OTHER_UID = 4321  # not in the image's /etc/passwd, nor the host's


@pytest.fixture(scope="module")
def printed(image: Image) -> list[str]:
    """The lines `invoke build` printed after "Next:" for this image's cell (a cache-warm build of it)."""
    cells = json.loads(invoke("matrix", "--json").stdout)
    flags = next((cell["flags"] for cell in cells if f"{cell['image']}:{cell['tags'][0]}" == image.ref), None)
    if flags is None:
        pytest.fail(f"{image.ref} is not the immutable tag of a cell of matrix.yaml", pytrace=False)
    mirror = image.label("mirror-profile")
    built = invoke("build", *flags.split(), "--mirror", mirror, "--no-engine-setup", timeout=BUILD_TIMEOUT_S)
    lines = built.stdout.splitlines()
    start = next((n for n, line in enumerate(lines) if line.startswith("Next: run it")), None)
    assert start is not None, f"`invoke build {flags}` printed no `Next: run it`:\n{built.stdout[-3000:]}"
    commands = [line.strip() for line in lines[start + 1 :] if line.startswith("  ")]
    assert commands and commands[-1].startswith("docker run ") and commands[-1].endswith(f" {image.ref}"), commands
    print("printed:\n" + "\n".join(lines[start:]))
    return commands


def invoke(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"invoke {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr}"
    )
    return done


@contextlib.contextmanager
def home_of(uid: int) -> Iterator[Path]:
    """A fresh home folder owned by `uid`, in a folder every uid may pass through; removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="dlimages-run-line-", dir="/var/tmp"))
    try:
        parent.chmod(0o755)
        home = parent / "home"
        home.mkdir(mode=0o755)
        os.chown(home, uid, uid)
        yield home
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def can_start_as(uid: int) -> None:
    """Skips, saying why, where this run cannot start a shell as `uid` (only root can, through setpriv)."""
    if os.getuid() not in (0, uid):
        pytest.skip(f"starting the printed line as uid {uid} needs root (setpriv); this run is uid {os.getuid()}")


def as_user(uid: int, home: Path) -> list[str]:
    """The argv prefix that runs a command as `uid` (its group the same number), in the docker socket's group."""
    if os.getuid() == uid:
        return ["env", f"HOME={home}"]
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert host.startswith("unix://"), f"DOCKER_HOST={host}: the test starts the line through a local socket"
    socket_gid = os.stat(host.removeprefix("unix://")).st_gid
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={socket_gid}",
        "env", f"HOME={home}", f"USER=u{uid}", f"LOGNAME=u{uid}",
    ]  # fmt: skip


def port_taken() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_socket:
        return probe_socket.connect_ex(("127.0.0.1", PORT)) == 0


@contextlib.contextmanager
def pasted(lines: list[str], user: list[str], docker: Docker, image: Image) -> Iterator[tuple[Server, str, str]]:
    """The printed lines run by bash as `user`; yields the server, the token it printed and its container's ID.
    The container is stopped and removed afterwards, however the test ends."""
    assert not port_taken(), f"127.0.0.1:{PORT} is taken: the printed line publishes JupyterLab there"
    before = set(docker("ps", "-q", "--no-trunc").out.split())
    shell = subprocess.Popen(
        [*user, "bash", "-c", "\n".join(lines)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    container, log = "", []
    reader = threading.Thread(target=lambda: log.extend(iter(shell.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        token = None
        while token is None and time.monotonic() < deadline:
            found = TOKEN_URL.search("".join(log))
            token = found.group(1) if found else None
            assert token or shell.poll() is None, (
                f"the pasted line ended (exit {shell.returncode}):\n{''.join(log)[-3000:]}"
            )
            time.sleep(0.2)
        assert token, (
            f"JupyterLab printed no http://127.0.0.1:8888/lab?token=... in {START_TIMEOUT_S} s:\n{''.join(log)}"
        )
        started = set(docker("ps", "-q", "--no-trunc", "--filter", f"ancestor={image.ref}").out.split()) - before
        assert len(started) == 1, f"the pasted line should start one container of {image.ref}, started {started}"
        container = started.pop()
        yield Server(container, f"http://127.0.0.1:{PORT}", docker), token, container
    finally:
        if container:
            docker("stop", "--time", "10", container, check=False)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.wait(timeout=30)
        if container:
            docker("rm", "--force", container, check=False)


@pytest.mark.parametrize("uid", [1000, OTHER_UID], ids=["uid-1000", "another-uid"])
def test_the_printed_line_runs_jupyterlab_for_the_user(
    uid: int,
    request: pytest.FixtureRequest,
    browser: Callable[[], WebDriver],  # noqa: F811 - test_browser's fixture
    docker: Docker,
    image: Image,
    artifacts_dir: Path,
    record_property: Callable[[str, object], Any],
) -> None:
    browser_executables()
    can_start_as(uid)
    printed: list[str] = request.getfixturevalue("printed")
    # The line itself: never a pull, the user's own uid, JupyterLab on this machine only, no fixed token.
    line = printed[-1]
    assert " --pull never " in line and ' --user "$(id -u):$(id -g)" ' in line, line
    assert " -p 127.0.0.1:8888:8888 " in line and "JUPYTER_TOKEN" not in line, line
    with home_of(uid) as home, pasted(printed, as_user(uid, home), docker, image) as (server, token, container):
        assert docker("exec", container, "id", "-u").out.strip() == str(uid), "the container does not run as the user"
        driver = browser()
        try:
            output = run_in_new_notebook(driver, server, token, probe(image), RUN_TIMEOUT_S)
            config = driver.execute_script("return document.getElementById('jupyter-config-data').textContent")
            # Saved by hand, as a user would: the file the launcher made gets the cell.
            driver.find_element("css selector", ".jp-NotebookPanel .jp-Cell .cm-content").click()
            save(driver, NOTEBOOK)
            owners = {path.name: path.stat().st_uid for path in wait_for_notebook(home / "workspace", probe(image))}
            news = driver.find_elements("xpath", "//*[contains(., 'Jupyter news')]")
        finally:
            save_screenshot(driver, artifacts_dir / f"run-line-{uid}.png", record_property)
    assert output, "the notebook printed nothing"
    disabled = json.loads(config).get("disabledExtensions")  # the page's list (a file's mapping, merged)
    assert ANNOUNCEMENTS in (disabled or []), f"JupyterLab's page config does not turn off {ANNOUNCEMENTS}: {disabled}"
    assert not news, "JupyterLab shows the news pop-up"
    assert owners and set(owners.values()) == {uid}, f"notebooks in the mounted folder and their owners: {owners}"


def save(driver: WebDriver, name: str) -> None:
    """Ctrl+S, pressed as a person presses it. JupyterLab 4 asks for a name on the first save: `name`, then
    "Rename and Save"; a lab that does not ask saves the launcher's Untitled.ipynb."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    ActionChains(driver).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
    try:
        field = WebDriverWait(driver, ASK_NAME_S).until(
            expected_conditions.element_to_be_clickable(("css selector", ".jp-Dialog input"))
        )
    except TimeoutException:
        return
    field.send_keys(name)  # replaces the selected "Untitled", keeping .ipynb
    driver.find_element("css selector", ".jp-Dialog .jp-mod-accept").click()


def wait_for_notebook(folder: Path, code: str, timeout: float = LOAD_TIMEOUT_S) -> list[Path]:
    """The notebooks in the mounted folder once one holds `code` in a cell (JupyterLab saved it); fails after
    `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(folder.glob("*.ipynb"))
        if any(code in cell_sources(path) for path in found):
            return found
        time.sleep(1)
    pytest.fail(f"no notebook holding the cell's code in {folder} after {timeout:.0f} s: {sorted(folder.iterdir())}")


def cell_sources(path: Path) -> str:
    try:
        cells = json.loads(path.read_text()).get("cells", [])
    except ValueError:  # being written
        return ""
    return "\n".join("".join(cell.get("source", "")) for cell in cells)
