"""The OS package locks against the real engine and Debian's archive: each offline base (matrix.yaml's OSes with
`bootstrap`: Debian 12 and 13) made from a repository on 127.0.0.1 that holds only the locked .deb files is the very
image made from the live archive (CI's builds made Debian 12's; this test makes the others first), and a .deb whose
hash differs from its lock stops a build, naming the package, before anything is built or tagged.

(CI also builds the PyTorch cell cold from such a repository and gets the image ID of its build from the archive:
the `repro` step of `invoke ci`.) Making the base needs root (mmdebstrap); the build test runs in a clone of HEAD.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import unquote

import pytest
from support import free_port, require_engine

from dlimages.artifacts import layout, oslock
from dlimages.building.mirrors import NoDebianMirror, debian_mirrors
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.generate import aptlock
from dlimages.generate.project import Project

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MATRIX = Project(REPO).matrix
BASES = oslock.offline_bases(MATRIX)  # by OS name
CELL = "images/pytorch/cuda12.1-torch2.1.2-py3.11-runtime"
CELL_IMAGE = "lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime"
CELL_FLAGS = ["--cuda", "12.1", "--torch", "2.1", "--python", "3.11"]
TIMEOUT_S = 900


def invoke(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """The locked .deb files in a folder (`invoke apt-repo`), served on 127.0.0.1: (URL, the paths asked for)."""
    folder = tmp_path / "repo"
    done = invoke("apt-repo", "--to", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            asked.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("os_name", list(BASES))
def test_the_base_from_a_repository_on_127_0_0_1_is_the_base_from_the_live_archive(
    served: tuple[str, list[str]], os_name: str
) -> None:
    require_engine(buildx=False)
    if os.geteuid() != 0:
        pytest.skip("making the base needs root (mmdebstrap --mode=root); CI runs this test as root")
    image = MATRIX.os[os_name].image
    before = RUNNER.image_id(image)
    if before is None:  # not made by a build yet: make it from the live archive first
        done = invoke("base", "--os", os_name)
        assert done.returncode == 0, done.stdout + done.stderr
        before = RUNNER.image_id(image)
    url, asked = served
    done = invoke("base", "--os", os_name, "--apt-from", url)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert f"from the repository ({url}/debian" in done.stdout
    lock = oslock.read(REPO / oslock.base_lock_path(os_name))
    assert lock is not None
    fetched = {unquote(path).split("/", 2)[2] for path in asked if path.endswith(".deb")}  # /debian/pool/...
    assert fetched == {deb.path for deb in lock.debs}  # every file from there: none from a cache
    assert RUNNER.image_id(image) == before, f"{image}: made from the repository, another image than from the archive"


def test_a_deb_whose_hash_differs_from_its_lock_fails_the_build_naming_it_and_moves_no_tag(tmp_path: Path) -> None:
    require_engine()
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=300)
    lock = clone / CELL / oslock.APT_LOCK
    text = lock.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("zsh="))
    spec, sha = line.split()[0], line.rsplit("sha256:", 1)[1]
    tampered = sha[::-1] if sha[::-1] != sha else "0" * 64
    lock.write_text(text.replace(line, line.replace(sha, tampered)), encoding="utf-8")
    before = RUNNER.image_id(CELL_IMAGE)

    done = invoke("build", *CELL_FLAGS, cwd=clone)

    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert re.search(rf"{re.escape(spec)}: \S+ has sha256 {sha}, the lock says {tampered}: refused", output), output[
        -3000:
    ]
    assert "Traceback" not in output
    assert RUNNER.image_id(CELL_IMAGE) == before  # nothing was built, so no tag moved


@pytest.mark.parametrize("os_name", list(BASES))
def test_a_lock_on_a_pulled_base_resolves_on_the_packages_that_base_has(os_name: str) -> None:
    # The path of the cells on ubuntu and nvidia/cuda bases (their base's own /var/lib/dpkg/status, read with
    # `docker run`), tried here on the offline bases, the bases this machine has: it must give exactly the
    # apt.lock the Debian cells were resolved with together with their base.
    require_engine(buildx=False)
    project = Project(REPO)
    folders = [layout.cell_dir(REPO, c) for c in project.expansion.cells if c.bootstrap_base and c.os == os_name]
    cell = next(filter(None, (oslock.read(folder / oslock.APT_LOCK) for folder in folders)), None)
    if cell is None:
        pytest.skip(f"no cell on the {os_name} base has an apt.lock")
    image = MATRIX.os[os_name].image
    status = RUNNER(["docker", "run", "--rm", "--entrypoint", "cat", image, "/var/lib/dpkg/status"])
    assert status.ok, f"{image} (made by the test above, or `invoke base`): {status.err}"
    try:
        main, security = debian_mirrors()
    except NoDebianMirror:
        main, security = oslock.DEBIAN_PUBLIC["debian"], oslock.DEBIAN_PUBLIC["debian-security"]
    packages = sorted(project.matrix.packages.apt)
    urls = {"debian": main, "debian-security": security}
    lock = aptlock.resolve_on(BASES[os_name], packages, image, status.out, urls, RUNNER)
    assert lock.debs == cell.debs
