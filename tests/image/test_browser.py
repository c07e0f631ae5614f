"""JupyterLab in a real browser: headless Chromium opens the lab with the token, makes a notebook on the image's
Python 3 kernel, runs the framework's import in a cell and reads the output from the page.

Debian's `chromium` and `chromium-driver` (`scripts/engine.sh --fixtures` installs them) driven by Selenium, pointed
at that chromedriver explicitly: Selenium Manager never runs, nothing downloads a browser or a driver. Missing either
is a broken setup and fails; DLIMAGES_NO_BROWSER=1 skips these tests instead. Screenshots go to the artifacts
directory (`--artifacts-dir`, default .work/test-artifacts/) and their paths into the report (`record_property`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# One copy of "start JupyterLab with a token on 127.0.0.1 and wait for it": the HTTP tests' own.
from test_jupyter import Server, serving

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # reported by the `browser` fixture, so that `pytest tests/image` still collects
    webdriver = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from conftest import Docker, Image
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

pytestmark = pytest.mark.image

NO_BROWSER_ENV = "DLIMAGES_NO_BROWSER"
LOAD_TIMEOUT_S = 90  # the lab's page and its launcher, on a busy 2-core machine
RUN_TIMEOUT_S = 240  # the cell: importing TensorFlow takes most of a minute on 2 cores
POLL_S = 1.0
RUN_ATTEMPTS = 3
IDLE_UNRUN_S = 5.0
PROXY_ENV = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
# The kernel states JupyterLab's execution indicator shows when the kernel cannot run anything.
KERNEL_GONE = ("dead", "disconnected")
# What each framework's cell prints: its version and whether it sees a GPU (never here).
PROBES = {
    "pytorch": "import torch; print(torch.__version__, torch.cuda.is_available())",
    "tensorflow": 'import tensorflow as tf; print(tf.__version__, len(tf.config.list_physical_devices("GPU")) > 0)',
}
# The broken kernel: the launcher the Python 3 kernelspec runs exits at once, so every (re)start fails.
BROKEN_KERNEL_DOCKERFILE = """\
FROM {image}
RUN launcher="$(/opt/venv/bin/python -c \\
        'import importlib.util; print(importlib.util.find_spec("ipykernel_launcher").origin)')" \\
 && printf 'raise SystemExit("ipykernel broken on purpose by tests/image/test_browser.py")\\n' > "$launcher"
"""


class NotebookFailed(AssertionError):
    """The notebook did not run the cell: an error output, a kernel that died, a dialog, or no output in time."""


# ---------------------------------------------------------------------------------------------
# The browser.
# ---------------------------------------------------------------------------------------------


def browser_executables() -> tuple[str, str]:
    """Debian's chromium and chromedriver; fails (or skips under DLIMAGES_NO_BROWSER=1) when one is missing."""
    if os.environ.get(NO_BROWSER_ENV) == "1":
        pytest.skip(f"{NO_BROWSER_ENV}=1: the browser tests are turned off")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromium-driver", driver)) if not path]
    hints = ["`apt-get install chromium chromium-driver` (or `sudo bash scripts/engine.sh --fixtures`)"] * bool(missing)
    if webdriver is None:
        missing.append("selenium")
        hints.append("`pip install -e '.[dev]'`")
    if missing or chromium is None or driver is None:
        pytest.fail(
            f"the browser test needs {', '.join(missing)}: {' and '.join(hints)}, "
            f"or {NO_BROWSER_ENV}=1 to skip these tests",
            pytrace=False,
        )
    return chromium, driver


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], WebDriver]]:
    """Starts headless Chromium sessions (each with its own cookies) and quits every one afterwards."""
    chromium, driver_path = browser_executables()
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager, should anything reach it, never downloads
    for proxy in PROXY_ENV:  # Selenium's own calls go to chromedriver on this machine, never through a proxy
        monkeypatch.delenv(proxy, raising=False)
    started: list[WebDriver] = []

    def start() -> WebDriver:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start. --no-proxy-server: the token
        # goes to 127.0.0.1 only, never to a proxy the environment names (as test_jupyter.py's requests).
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--no-proxy-server",
            "--disable-background-networking",
            "--window-size=1400,900",
        ):
            options.add_argument(flag)
        try:
            session = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
        except WebDriverException as error:
            pytest.fail(f"headless Chromium ({chromium}, {driver_path}) did not start: {error.msg}", pytrace=False)
        started.append(session)
        return session

    yield start
    for session in started:
        with contextlib.suppress(WebDriverException):
            session.quit()


def save_screenshot(driver: WebDriver, path: Path, record_property: Callable[[str, object], None]) -> None:
    """Best effort: a screenshot that fails must not hide why the test failed."""
    with contextlib.suppress(WebDriverException):
        if driver.save_screenshot(str(path)):
            record_property("screenshot", str(path))
            print(f"screenshot: {path}")


# ---------------------------------------------------------------------------------------------
# The check: a notebook runs one cell.
# ---------------------------------------------------------------------------------------------


def run_in_new_notebook(driver: WebDriver, server: Server, token: str, code: str, timeout: float) -> str:
    """Opens the lab with the token, makes a notebook on the Python 3 kernel, runs `code` in its first cell once
    the kernel is idle, and returns what the cell printed to stdout. Raises NotebookFailed as soon as the page
    shows that the kernel cannot run it (an error output, the kernel dead or disconnected, a dialog), or when the
    kernel was not idle or nothing was printed within `timeout` each."""
    driver.get(f"{server.base_url}/lab?token={token}")
    wait = WebDriverWait(driver, LOAD_TIMEOUT_S)
    card = wait.until(
        expected_conditions.element_to_be_clickable(
            (By.CSS_SELECTOR, '.jp-LauncherCard[data-category="Notebook"][title^="Python 3"]')
        ),
        "the launcher shows no Python 3 notebook",
    )
    card.click()
    editor = wait.until(
        expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell .cm-content")),
        "the new notebook shows no cell to type in",
    )
    # Seen here: a run sent while the new notebook's kernel still connects ends as `[ ]`, no output. Wait first.
    poll_notebook(driver, server, timeout, "the kernel to be idle", lambda status, _printed: status == "idle")
    editor.click()
    editor.send_keys(code)
    # Run only once the editor holds all of the code: the status bar's cursor column comes from its state.
    wait.until(
        expected_conditions.presence_of_element_located(
            (By.XPATH, f"//span[normalize-space()='Ln 1, Col {len(code) + 1}']")
        ),
        "the notebook's editor did not take the code typed into it",
    )
    run_first_cell(driver, server, timeout)
    printed = poll_notebook(
        driver, server, timeout, "the cell's output", lambda status, out: bool(out and status == "idle")
    )
    return "\n".join(block.text for block in printed).strip()


def run_first_cell(driver: WebDriver, server: Server, timeout: float) -> None:
    """Shift+Enter in the first cell until it is queued or ran (`[*]` or a count). Seen here on a busy machine
    (JupyterLab 4.0): a run that ends as `[ ]` with no output and an idle kernel, as a person would see and
    repeat. Up to RUN_ATTEMPTS runs, each dropped one after IDLE_UNRUN_S of an idle kernel and an unrun cell."""
    for attempt in range(1, RUN_ATTEMPTS + 1):
        driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell .cm-content").click()
        driver.switch_to.active_element.send_keys(Keys.SHIFT, Keys.ENTER)
        idle_since = [time.monotonic()]

        def started(status: str, printed: list[WebElement], since: list[float] = idle_since) -> bool:
            prompt = driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell .jp-InputPrompt").text
            if printed or re.search(r"\[(\*|\d+)\]", prompt):
                return True
            if status != "idle":
                since[0] = time.monotonic()
            return time.monotonic() - since[0] > IDLE_UNRUN_S

        poll_notebook(driver, server, timeout, "the cell to start", started)
        prompt = driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell .jp-InputPrompt").text
        if re.search(r"\[(\*|\d+)\]", prompt) or driver.find_elements(
            By.CSS_SELECTOR, '.jp-NotebookPanel .jp-Cell [data-mime-type="application/vnd.jupyter.stdout"]'
        ):
            return
        print(f"run {attempt} of the first cell was dropped (prompt {prompt!r}); running it again")
    raise NotebookFailed(f"the first cell never ran in {RUN_ATTEMPTS} runs\n{kernel_log(server)}")


def poll_notebook(
    driver: WebDriver,
    server: Server,
    timeout: float,
    what: str,
    done: Callable[[str, list[WebElement]], bool],
) -> list[WebElement]:
    """Polls the notebook's first cell and kernel status until `done(status, stdout blocks)`; returns the blocks.
    Fails at once on an error output, a kernel that is gone, or a dialog."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        cell = driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell")
        errors = cell.find_elements(By.CSS_SELECTOR, '[data-mime-type="application/vnd.jupyter.error"]')
        if errors:
            raise NotebookFailed(f"the cell raised:\n{errors[0].text[-2000:]}")
        indicator = driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Notebook-ExecutionIndicator")
        status = (indicator[0].get_attribute("data-status") or "") if indicator else ""
        if status in KERNEL_GONE:
            raise NotebookFailed(f"the notebook's kernel is {status}: it never ran the cell\n{kernel_log(server)}")
        dialogs = driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog")
        if dialogs:
            raise NotebookFailed(f"JupyterLab shows a dialog:\n{dialogs[0].text[:1000]}\n{kernel_log(server)}")
        printed = cell.find_elements(By.CSS_SELECTOR, '[data-mime-type="application/vnd.jupyter.stdout"]')
        if done(status, printed):
            return printed
        time.sleep(POLL_S)
    raise NotebookFailed(f"waited {timeout:.0f} s for {what} (kernel status {status!r})\n{kernel_log(server)}")


def kernel_log(server: Server, lines: int = 30) -> str:
    """The server log's last lines without traceback bodies (indented): what the kernel said is not lost in them."""
    kept = [line for line in server.logs().splitlines() if line.strip() and not line[0].isspace()]
    return "JupyterLab's log ends:\n" + "\n".join(kept[-lines:])


def expected_output(image: Image) -> re.Pattern[str]:
    """The framework's version as its label says (PyTorch may add a local version, +cu121) and False: no GPU."""
    version = re.escape(image.label("framework-version"))
    local = r"(\+\w+)?" if image.label("framework") == "pytorch" else ""
    return re.compile(rf"{version}{local} False")


def probe(image: Image) -> str:
    framework = image.label("framework")
    if framework not in PROBES:
        pytest.fail(f"{image.ref}: no notebook probe for framework {framework!r} (known: {', '.join(PROBES)})")
    return PROBES[framework]


def screenshot_path(artifacts_dir: Path, image: Image, what: str) -> Path:
    return artifacts_dir / f"jupyterlab-{what}-{re.sub(r'[^A-Za-z0-9._-]+', '_', image.ref)}.png"


# ---------------------------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab_token() -> str:
    return os.urandom(16).hex()


@pytest.fixture(scope="module")
def lab(docker: Docker, image: Image, lab_token: str) -> Iterator[Server]:
    browser_executables()  # skip or fail before starting a container no browser will open
    with serving(docker, image, f"JUPYTER_TOKEN={lab_token}") as started:
        yield started


def test_notebook_runs_the_framework(
    browser: Callable[[], WebDriver],
    lab: Server,
    lab_token: str,
    image: Image,
    artifacts_dir: Path,
    record_property: Callable[[str, object], Any],
) -> None:
    code, expected = probe(image), expected_output(image)
    driver = browser()
    try:
        printed = run_in_new_notebook(driver, lab, lab_token, code, RUN_TIMEOUT_S)
    finally:
        save_screenshot(driver, screenshot_path(artifacts_dir, image, "notebook"), record_property)
    assert expected.fullmatch(printed), f"the cell printed {printed!r}, expected {expected.pattern!r} for {image.ref}"


def test_wrong_token_gets_the_login_page(browser: Callable[[], WebDriver], lab: Server) -> None:
    driver = browser()
    driver.get(f"{lab.base_url}/lab?token=wrong-{os.urandom(4).hex()}")
    WebDriverWait(driver, LOAD_TIMEOUT_S).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "input[type=password]")),
        f"no login form at {driver.current_url}",
    )
    assert driver.current_url.startswith(f"{lab.base_url}/login"), f"a wrong token led to {driver.current_url}"
    assert not driver.find_elements(By.CSS_SELECTOR, ".jp-LabShell, .jp-LauncherCard"), "the lab opened anyway"


def test_the_check_fails_on_a_broken_kernel(
    browser: Callable[[], WebDriver],
    docker: Docker,
    image: Image,
    tmp_path: Path,
    artifacts_dir: Path,
    record_property: Callable[[str, object], Any],
) -> None:
    """The same check on a test-only image whose ipykernel cannot start must fail, and say why."""
    tag = f"lab/test-broken-kernel-{os.getpid()}"
    (tmp_path / "Dockerfile").write_text(BROKEN_KERNEL_DOCKERFILE.format(image=image.ref))
    # The engine's own builder: it sees the local image under test, which another builder would try to pull.
    docker("buildx", "build", "--builder", "default", "--load", "--tag", tag, str(tmp_path), timeout=300)
    try:
        broken = dataclasses.replace(image, ref=tag)
        token = os.urandom(16).hex()
        with serving(docker, broken, f"JUPYTER_TOKEN={token}") as server:
            driver = browser()
            try:
                with pytest.raises(NotebookFailed, match="kernel") as failed:
                    run_in_new_notebook(driver, server, token, probe(image), RUN_TIMEOUT_S)
            finally:
                save_screenshot(driver, screenshot_path(artifacts_dir, image, "broken-kernel"), record_property)
        print(f"the check failed, as it must:\n{failed.value}")
        assert "broken on purpose" in str(failed.value), (
            f"the failure does not name the kernel's error:\n{failed.value}"
        )
    finally:
        docker("image", "rm", "--force", tag, check=False)
