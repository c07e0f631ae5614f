"""A signed zstd push stopped where users stop it, against the real engine, skopeo, cosign and a registry on
127.0.0.1: SIGKILL and Ctrl-C while it compresses, while skopeo uploads and while cosign signs. Each leaves no
process, no local tag of the registry's name and never an unsigned release tag; Ctrl-C leaves no scratch folder and
says so (exit 130); the scratch folder a SIGKILL leaves is removed by the next push, which then publishes the
signed tag. And `invoke verify` against a registry that stops answering gives up, naming it, instead of waiting an
hour; an image it refuses does not stay pulled under the name; a reading container a killed process left is removed
(issue 32, findings 4, 6 and 9).

Each stop pushes an image of its own (the offline base with 96 MB of fresh random bytes) to a repository of its
own, so each stage lasts long enough to be stopped in: blobs an earlier push left in the registry would make skopeo's
upload a blink, and a test stopping "skopeo" would stop the tagging instead.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import free_port, require_engine

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.publish import signing

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
BASE = "dlimages/base:debian12"
NAME = f"lab/test-stopped-{os.getpid()}"
REF = f"{NAME}:v1-stopped"  # a release tag as the matrix makes them: VERSION-CELL
PASSWORD = "not-a-secret"  # noqa: S105 (a throwaway key)


def docker(*args: str) -> str:
    done = RUNNER.docker(*args, timeout=600)
    if not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip()}", pytrace=False)
    return done.out.strip()


def at_a_terminal() -> None:
    """Ctrl-C as at a terminal: SIGINT as the default (a CI started in a shell's background ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_engine()
    if RUNNER.image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: make it with `invoke base`", pytrace=False)
    folder = tmp_path_factory.mktemp("stopped")
    done = RUNNER(["cosign", "generate-key-pair"], cwd=folder, env={**os.environ, "COSIGN_PASSWORD": PASSWORD})
    assert done.ok, done.err
    env = {**os.environ, "REGISTRY_STATE_DIR": str(folder / "registry")}
    name, port = f"pytest-{os.getpid()}-stopped", free_port()
    started = RUNNER([str(REGISTRY_SH), "start", name, str(port)], env=env)
    if not started.ok:
        pytest.fail(f"registry.sh start {name} failed:\n{started.out}{started.err}", pytrace=False)
    build_noise(REF, folder)
    yield {"registry": f"127.0.0.1:{port}", "key": str(folder / "cosign.key"), "folder": str(folder)}
    listed = RUNNER.docker("image", "ls", "--format", "{{.Repository}} {{.ID}}").out.split("\n")
    ids = {line.split()[1] for line in listed if line.split() and NAME in line.split()[0]}
    for image_id in sorted(ids):
        RUNNER.docker("image", "rm", "--force", image_id)
    RUNNER([str(REGISTRY_SH), "stop", name], env=env)


def build_noise(ref: str, folder: Path) -> None:
    """`ref`: the base with 96 MB of random bytes no other image has."""
    folder.mkdir(exist_ok=True)
    (folder / "Dockerfile").write_text(
        f"FROM {BASE}\nLABEL io.dlimages.cell=stopped org.opencontainers.image.version=v1-stopped\n"
        f"RUN head -c 96000000 /dev/urandom > /noise && echo {os.urandom(8).hex()} > /marker\n"
    )
    docker("buildx", "build", "--load", "--provenance=false", "--tag", ref, str(folder))


def start_push(setup: dict[str, str], out: Path, ref: str = REF) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "push", "--image", ref,
            "--registry", setup["registry"], "--compression", "zstd", "--sign-key", setup["key"],
            "--report", str(out.with_suffix(".report.json")), "--no-engine-setup"]  # fmt: skip
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "PYTHONUNBUFFERED": "1"}
    with out.open("wb") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=at_a_terminal
        )


def descendants(pid: int) -> dict[int, str]:
    """Every process under `pid`, by its program's name."""
    return {child: name for child, (name, _) in _tree(pid).items()}


def uploading(pid: int) -> bool:
    """Whether skopeo copies the push's layout (not the tagging copy, registry to registry, after signing)."""
    return any(name == "skopeo" and any(a.startswith("oci:") for a in argv) for name, argv in _tree(pid).values())


def _tree(pid: int) -> dict[int, tuple[str, list[str]]]:
    children: dict[int, list[int]] = {}
    found: dict[int, tuple[str, list[str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            found[int(entry.name)] = ((entry / "comm").read_text().strip(), argv)
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    under, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            under[child] = found.get(child, ("?", []))
            todo.append(child)
    return under


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie has ended: it waits only for whoever adopted it to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(push: subprocess.Popen[bytes], out: Path, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 300
    while not ready():
        if push.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the push ended (or took too long) before the point to stop it:\n{out.read_text()}")
        time.sleep(0.02)


def in_the_registry(setup: dict[str, str], ref: str = REF) -> bool:
    done = RUNNER(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{setup['registry']}/{ref}"])
    return done.ok


def scratch_of(pid: int) -> set[str]:
    """The scratch folders the push holds open (it keeps its own locked)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.parent == REPO / ".work" and target.name.startswith("push-"):
            found.add(target.name)
    return found


def scratch_folders() -> set[str]:
    return {path.name for path in (REPO / ".work").glob("push-*")}


def registry_tags() -> list[str]:
    listed = RUNNER.docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}").out.split()
    return [name for name in listed if name.startswith("127.0.0.1:") and NAME in name and not name.endswith("<none>")]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
@pytest.mark.parametrize("where", ["compressing", "skopeo", "cosign"])
def test_a_signed_zstd_push_stopped_anywhere_leaves_nothing_and_no_unsigned_tag(
    setup: dict[str, str], tmp_path: Path, where: str, how: str
) -> None:
    ref = f"{NAME}-{where}-{how.lower()}:v1-stopped"  # its own blobs: an upload that lasts (the module's docstring)
    build_noise(ref, tmp_path / "image")
    out = tmp_path / "push.log"
    push = start_push(setup, out, ref)
    if where == "compressing":
        wait_for(push, out, lambda: b"compressing" in out.read_bytes())
        time.sleep(0.3)
    elif where == "skopeo":
        wait_for(push, out, lambda: uploading(push.pid))
    else:
        wait_for(push, out, lambda: where in descendants(push.pid).values())
    under, held = descendants(push.pid), scratch_of(push.pid)
    os.killpg(push.pid, getattr(signal, how))  # Ctrl-C at a terminal: the whole foreground group gets SIGINT
    code = push.wait(timeout=120)
    said = out.read_text()
    for _ in range(50):
        left = [f"{pid} {name}" for pid, name in under.items() if alive(pid)]
        if not left:
            break
        time.sleep(0.1)
    assert left == [], f"processes outlived the push: {left}\n{said}"
    assert "Traceback" not in said, said
    assert registry_tags() == [], said
    assert not in_the_registry(setup, ref), f"{ref} was published before it was signed:\n{said}"
    made = held & scratch_folders()  # its own: other pushes may run beside it
    assert len(held) == (0 if where == "cosign" else 1), held  # signing starts once the scratch folder is gone
    if how == "SIGINT":
        assert code == 130 and "interrupted" in said, said
        assert made == set(), said
    else:
        assert code == -signal.SIGKILL
        assert made == held
        for name in made:  # as if a minute had passed: a younger folder may be a push that has not locked it yet
            os.utime(REPO / ".work" / name, (time.time() - 3600, time.time() - 3600))
        again = start_push(setup, tmp_path / "again.log", ref)
        assert again.wait(timeout=600) == 0, (tmp_path / "again.log").read_text()
        after = (tmp_path / "again.log").read_text()
        # Gone: swept by this push (it says so), or by another test's push that started first (tests run beside it).
        assert not made & scratch_folders(), after
        assert in_the_registry(setup, ref)
        verified = subprocess.run(
            [sys.executable, "-m", "invoke", "--search-root", str(REPO), "verify", "--image",
             f"{setup['registry']}/{ref}", "--key", setup["key"].replace(".key", ".pub"), "--no-engine-setup"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout + verified.stderr
        docker("image", "rm", f"{setup['registry']}/{ref}")  # verify's pull: a tag, but not the push's
    docker("image", "rm", ref)


class _Silent(http.server.BaseHTTPRequestHandler):
    """A registry that answers its ping, then nothing: it holds every other request open."""

    def do_GET(self) -> None:
        if self.path == "/v2/":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        time.sleep(600)

    do_HEAD = do_GET

    def log_message(self, *_: object) -> None:
        pass


def test_verify_gives_up_on_a_registry_that_stops_answering_and_names_it(setup: dict[str, str]) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    registry = f"127.0.0.1:{server.server_address[1]}"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "verify", "--image", f"{registry}/{REF}",
         "--key", setup["key"].replace(".key", ".pub"), "--no-engine-setup"],
        capture_output=True, text=True, timeout=600, check=False, env={**os.environ, "DLIMAGES_STALL_S": "20"},
    )  # fmt: skip
    took = time.monotonic() - started
    server.shutdown()
    assert done.returncode == 1 and 20 <= took < 60, (took, done.stdout + done.stderr)
    assert f"nothing came from {registry} for 20 s while pulling {registry}/{REF}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_image_verify_refuses_does_not_stay_under_its_name(setup: dict[str, str], tmp_path: Path) -> None:
    unsigned = f"{NAME}:v1-unsigned"
    docker("tag", REF, unsigned)
    pushed = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "push", "--image", unsigned, "--registry",
         setup["registry"], "--no-sign", "--report", str(tmp_path / "report.json"), "--no-engine-setup"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    remote = f"{setup['registry']}/{unsigned}"
    assert RUNNER.image_id(remote) is None  # the push's temporary tag is gone
    refused = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "verify", "--image", remote, "--key",
         setup["key"].replace(".key", ".pub"), "--no-engine-setup"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "not signed" in refused.stderr, refused.stdout + refused.stderr
    assert RUNNER.image_id(remote) is None, "the refused image stayed pulled under the registry's name"


def test_a_reading_container_left_by_a_killed_process_is_removed_by_the_next_read(setup: dict[str, str]) -> None:
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    owner = f"{socket.gethostname()}:{dead}"
    left = docker("create", "--label", f"io.dlimages.reader={owner}", "--entrypoint", "/bin/true", BASE)
    files = signing.read_files(BASE)
    assert files["/etc/os-release"] is not None
    assert RUNNER.docker("container", "inspect", left).code != 0, f"the container {left} a dead process left stayed"
