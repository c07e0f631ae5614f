"""A built image against its own labels and /etc/dlimages/cell.json: what a user of the image would check.

Versions, packages, the non-root user, nothing left behind by the build, mirrors, signals, and the in-image
smoke commands on a machine without a GPU. Run: `pytest tests/image --image REF` (see README.md here).
"""

from __future__ import annotations

import datetime
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dlimages.payload.dl_stack import FRAMEWORKS, decode_cudnn_version, format_version

if TYPE_CHECKING:  # fixtures hand these over; importing conftest at run time is ambiguous under tests/
    from conftest import Container, Docker, Image

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
CELL_FILE = "/etc/dlimages/cell.json"
VENV = "/opt/venv"
DEV_UID = 1000
# A container that asks for no GPU still gets one where nvidia is the default runtime, since the images set
# NVIDIA_VISIBLE_DEVICES=all; `void` makes "no GPU" hold on any engine.
NO_GPU = ("-e", "NVIDIA_VISIBLE_DEVICES=void")
EXIT_SKIPPED = 77
EXIT_USAGE = 2
STOP_LIMIT_S = 5.0

# Import name -> what the user would pip-install, for the preinstalled package set.
PACKAGE_SET = {
    "numpy": "numpy",
    "pandas": "pandas",
    "scipy": "scipy",
    "cv2": "opencv-python-headless",
    "PIL": "pillow",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "yaml": "pyyaml",
    "requests": "requests",
    "jupyterlab": "jupyterlab",
    "ipykernel": "ipykernel",
}
# Ubuntu's own archive, as the official ubuntu images list it. Debian cells start from the base `invoke base`
# made, whose sources name the mirror it was bootstrapped from: those are read from the base image itself.
UPSTREAM_APT_HOSTS = {"ubuntu": {"archive.ubuntu.com", "security.ubuntu.com"}}
NVIDIA_APT_HOST = "developer.download.nvidia.com"  # nvidia/cuda bases keep NVIDIA's CUDA repository


def leading(version: str, parts: int) -> str:
    """The first `parts` dot-separated numbers, local version dropped: leading("8.9.2.26", 2) == "8.9"."""
    return ".".join(version.split("+")[0].split(".")[:parts])


def pip_packages(container: Container) -> dict[str, str]:
    """`pip list` of the venv as {normalized name: version}."""
    out = container.host.check_output(f"{VENV}/bin/python -m pip list --format=json")
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out)}


def os_family(cell: dict[str, Any]) -> str:
    return "ubuntu" if str(cell["os"]).startswith("ubuntu") else "debian"


# ---------------------------------------------------------------------------------------------
# The cell: labels, cell.json, Python, framework, CUDA libraries.
# ---------------------------------------------------------------------------------------------


def test_image_names_the_commit_it_was_built_from(image: Image) -> None:
    # `invoke build` passes the checkout's commit (with -dirty for uncommitted changes); "unknown" means it did not.
    revision = image.label("revision", prefix="org.opencontainers.image.")
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", revision), f"org.opencontainers.image.revision is {revision!r}"


def test_labels_agree_with_cell_file(image: Image, cell: dict[str, Any]) -> None:
    pairs = {
        "framework": "framework",
        "framework-version": "framework_version",
        "python": "python",
        "cuda": "cuda",
        "cudnn": "cudnn",
        "cuda-source": "cuda_source",
        "min-driver": "min_driver",
        "flavor": "flavor",
    }
    disagree = {
        label: (image.label(label), cell.get(key))
        for label, key in pairs.items()
        if image.label(label) != cell.get(key)
    }
    assert not disagree, f"label vs {CELL_FILE} (label, file): {disagree}"
    version = image.labels.get("org.opencontainers.image.version")
    assert version in cell.get("tags", []), f"image version label {version!r} is not among cell tags {cell.get('tags')}"


def test_python_version_matches_label(container: Container, image: Image) -> None:
    expected = image.label("python")
    which = container.host.check_output("command -v python3")
    assert which == f"{VENV}/bin/python3", f"python3 on PATH is {which}, not the venv's"
    reported = container.host.check_output(f"{VENV}/bin/python --version")
    assert reported.startswith(f"Python {expected}."), f"venv Python says {reported!r}, label python={expected}"


def test_framework_versions_match_labels(container: Container, image: Image) -> None:
    framework = image.label("framework")
    expected, cuda, cudnn = image.label("framework-version"), image.label("cuda"), image.label("cudnn")
    if framework == "pytorch":
        # cudnn.version() loads libcudnn without a GPU on CUDA builds, so this holds on any machine.
        found = container.python_json(
            "import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
            " 'cudnn': torch.backends.cudnn.version()}))"
        )
        # A local version (+cu121) may follow the release number.
        assert re.fullmatch(rf"{re.escape(expected)}(\+\w+)?", found["version"]), (
            f"torch.__version__ {found['version']!r}, label framework-version={expected}"
        )
        assert found["cuda"] is not None, "torch.version.cuda is None: a CPU-only torch"
        assert leading(found["cuda"], 2) == cuda, f"torch.version.cuda {found['cuda']}, label cuda={cuda}"
        assert found["cudnn"], "torch.backends.cudnn.version() is None: torch found no cuDNN"
        decoded = format_version(decode_cudnn_version(int(found["cudnn"])))
        assert leading(decoded, 2) == leading(cudnn, 2), (
            f"torch's cuDNN {decoded} ({found['cudnn']}), label cudnn={cudnn}"
        )
    elif framework == "tensorflow":
        found = container.python_json(
            "import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
            "import json, tensorflow as tf; info = tf.sysconfig.get_build_info()\n"
            "print(json.dumps({'version': tf.__version__, 'cuda': info.get('cuda_version'),"
            " 'cudnn': info.get('cudnn_version')}))"
        )
        assert found["version"] == expected, f"tf.__version__ {found['version']!r}, label framework-version={expected}"
        assert found["cuda"], "tf.sysconfig.get_build_info() has no cuda_version: a CPU-only TensorFlow"
        assert leading(str(found["cuda"]), 2) == cuda, f"TF build CUDA {found['cuda']}, label cuda={cuda}"
        # TF's build info often holds only the cuDNN major ("8").
        assert leading(str(found["cudnn"]), 1) == leading(cudnn, 1), (
            f"TF build cuDNN {found['cudnn']}, label cudnn={cudnn}"
        )
    else:
        pytest.fail(f"label framework={framework!r} is neither pytorch nor tensorflow")


def test_cuda_libraries_ship_once(container: Container, image: Image) -> None:
    """Wheel cells take CUDA from pip's nvidia-* packages and nothing else; base cells the other way round."""
    packages = pip_packages(container)
    libs = container.root.check_output(
        r"find / -xdev \( -name 'libcudnn*' -o -name 'libcublas*' \) \( -type f -o -type l \) 2>/dev/null || true"
    ).split()
    in_venv = sorted(p for p in libs if p.startswith(f"{VENV}/"))
    outside = sorted(p for p in libs if not p.startswith(f"{VENV}/"))
    cuda_major = image.label("cuda").split(".")[0]
    cudnn_wheel = f"nvidia-cudnn-cu{cuda_major}"
    if image.label("cuda-source") == "wheel":
        assert cudnn_wheel in packages, f"wheel cell without {cudnn_wheel} in pip list: {sorted(packages)}"
        assert leading(packages[cudnn_wheel], 2) == leading(image.label("cudnn"), 2), (
            f"{cudnn_wheel}=={packages[cudnn_wheel]}, label cudnn={image.label('cudnn')}"
        )
        assert in_venv, f"wheel cell, yet no libcudnn/libcublas under {VENV}"
        assert not outside, f"CUDA libraries ship twice: also outside {VENV}: {outside}"
    else:
        nvidia = sorted(p for p in packages if p.startswith(("nvidia-cudnn", "nvidia-cublas")))
        assert not nvidia, f"base-image CUDA, yet pip also installed {nvidia}"
        assert not in_venv, f"CUDA libraries ship twice: also under {VENV}: {in_venv}"
        assert outside, "base-image CUDA cell without libcudnn/libcublas in the base image"


# XLA links every GPU kernel with <CUDA dir>/nvvm/libdevice/libdevice.10.bc and assembles it with <CUDA dir>/bin/ptxas;
# Keras optimizers compile their update step with XLA from TF 2.11 on ("libdevice not found", tensorflow#58681).
LIBDEVICE = "nvvm/libdevice/libdevice.10.bc"
XLA_FROM = (2, 11)
NVCC_WHEEL_SEARCHED_FROM = (2, 14)  # TF's own search includes the nvcc wheel from 2.14 on (its `and-cuda` extra)
# Where XLA looks for that CUDA dir: --xla_gpu_cuda_data_dir first (the last one given wins), then TF's own
# candidates (tsl's CandidateCudaRoots: the nvcc wheel beside the tensorflow package, TF's copy in it, /usr/local/cuda).
XLA_CUDA_DIRS = r"""
import importlib.util, json, os, re
given = re.findall(r"--xla_gpu_cuda_data_dir=(\S+)", os.environ.get("XLA_FLAGS", ""))
package = os.path.dirname(importlib.util.find_spec("tensorflow").origin)
default = [os.path.join(package, "..", "nvidia", "cuda_nvcc"), os.path.join(package, "cuda"), "/usr/local/cuda"]
print(json.dumps({"given": given[-1:], "default": [os.path.normpath(d) for d in default]}))
"""


def test_xla_finds_libdevice_and_ptxas(container: Container, image: Image) -> None:
    if image.label("framework") != "tensorflow":
        pytest.skip("XLA's libdevice is TensorFlow's need")
    version = image.label("framework-version")
    release = tuple(int(part) for part in version.split(".")[:2])
    if release < XLA_FROM:
        pytest.skip(f"TensorFlow {version}'s Keras optimizers do not compile with XLA")
    found = container.python_json(XLA_CUDA_DIRS)
    if found["given"]:
        dirs, where = found["given"], f"where XLA_FLAGS points XLA ({found['given'][0]})"
    else:
        wheel = release >= NVCC_WHEEL_SEARCHED_FROM
        dirs = [d for d in found["default"] if wheel or not d.endswith("/nvidia/cuda_nvcc")]
        where = f"where TensorFlow {version} looks without XLA_FLAGS ({', '.join(dirs)})"
    with_libdevice = [d for d in dirs if container.host.file(f"{d}/{LIBDEVICE}").is_file]
    assert with_libdevice, f"no {LIBDEVICE} {where}"
    cuda, ptxas = image.label("cuda"), f"{with_libdevice[0]}/bin/ptxas"
    out = container.host.run(f"{ptxas} --version")
    assert out.rc == 0, f"{ptxas} does not run: {out.stderr.strip()}"
    assert f"release {cuda}," in out.stdout, f"{ptxas} is not CUDA {cuda}'s:\n{out.stdout}"


# ---------------------------------------------------------------------------------------------
# Packages.
# ---------------------------------------------------------------------------------------------


def test_preinstalled_packages_import(container: Container, image: Image) -> None:
    """Every package of the set, the framework, and those of its companions the cell installs (torch 2.12 on has no
    torchaudio; that the installed packages are the lock's is test_the_image_keeps_its_lock's)."""
    framework, *companions = FRAMEWORKS[image.label("framework")].modules
    found = container.python_json(
        "import importlib, importlib.metadata, json, os, sys, traceback\n"
        "os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        "result = {}\n"
        f"modules = {[*PACKAGE_SET, framework]!r}\n"
        f"for name in {companions!r}:\n"
        "    try:\n"
        "        importlib.metadata.distribution(name)\n"
        "        modules.append(name)\n"
        "    except importlib.metadata.PackageNotFoundError:\n"
        "        pass\n"
        "for name in modules:\n"
        "    try:\n"
        "        result[name] = str(getattr(importlib.import_module(name), '__version__', 'ok'))\n"
        "    except BaseException as error:\n"
        "        result[name] = 'FAILED ' + type(error).__name__ + ': ' + str(error).splitlines()[0][:200]\n"
        "print(json.dumps(result))",
        timeout=240,
    )
    failed = {name: why for name, why in found.items() if why.startswith("FAILED")}
    assert not failed, f"preinstalled modules that do not import: {failed}"


def test_pip_check_passes(container: Container) -> None:
    out = container.host.run(f"{VENV}/bin/python -m pip check")
    assert out.rc == 0, f"pip check: broken requirements:\n{out.stdout}{out.stderr}"


# ---------------------------------------------------------------------------------------------
# The user.
# ---------------------------------------------------------------------------------------------


def test_default_user_is_not_root(container: Container) -> None:
    assert container.host.check_output("id -u") == str(DEV_UID)
    assert container.host.check_output("id -g") == str(DEV_UID)
    assert container.host.check_output("pwd") == "/workspace", "WORKDIR is not /workspace"
    assert container.host.check_output('printf %s "$HOME"') == "/home/dev"


@pytest.mark.parametrize("path", ["/home/dev", "/workspace", VENV])
def test_user_owns_its_directories(container: Container, path: str) -> None:
    # Everything below, not only the top: a root-owned leftover (a cache mount point) breaks tools later.
    foreign = container.root.check_output(
        "find %s -xdev ! -uid %s -printf '%%u:%%g %%p\\n' | head -20", path, str(DEV_UID)
    )
    assert not foreign, f"not owned by uid {DEV_UID} under {path}:\n{foreign}"


@pytest.mark.parametrize("path", ["/home/dev/.cache", "/workspace", f"{VENV}/lib"])
def test_user_can_write(container: Container, path: str) -> None:
    """`pip install` without sudo needs the venv; caches need ~/.cache (matplotlib, torch hub, pip)."""
    probe = f"{path}/.dlimages-write-test"
    out = container.host.run("mkdir -p %s && touch %s && rm -f %s", path, probe, probe)
    assert out.rc == 0, f"the default user cannot write {path}: {out.stderr.strip()}"


# ---------------------------------------------------------------------------------------------
# Nothing left behind by the build.
# ---------------------------------------------------------------------------------------------


def test_apt_lists_are_removed(container: Container) -> None:
    left = container.root.check_output(
        "find /var/lib/apt/lists -mindepth 1 ! -name lock ! \\( -name partial -type d \\) 2>/dev/null | head -20"
    )
    assert not left, f"apt lists left in the image:\n{left}"


def test_no_logs_caches_or_machine_ids_hold_build_data(container: Container) -> None:
    """A log or ldconfig's aux-cache (it holds inode numbers) differs on every build: emptied, never left."""
    left = container.root.check_output(
        "find /var/log /var/cache/ldconfig /var/cache/apt /etc/machine-id /var/lib/dbus/machine-id "
        "-xdev -type f -size +0 2>/dev/null | head -20 || true"
    )
    assert not left, f"files a build writes differently every time, left with content:\n{left}"


def test_every_file_has_a_time_no_later_than_the_source(image: Image, docker: Docker) -> None:
    """dl-normalize sets what each step wrote to SOURCE_DATE_EPOCH (the image's `created`): no file is newer.

    In a container of its own: the shared one has been written to by other tests."""
    created = int(datetime.datetime.fromisoformat(image.created.replace("Z", "+00:00")).timestamp())
    # Not what the container runtime writes when it starts the container: /etc/hosts, /etc/mtab, /.dockerenv, ...
    runtime = ["/proc", "/sys", "/dev", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/mtab", "/.dockerenv"]
    prune = [word for path in runtime for word in ("-o", "-path", path)][1:]
    find = ["/", "-mindepth", "1", "-xdev", "(", *prune, ")", "-prune", "-o", "!", "-path", "/etc"]
    options = ("--user", "0", "--network", "none", "--entrypoint", "find")
    result = docker.run_once(image.ref, *find, "-newermt", f"@{created}", "-print", options=options)
    assert result.code == 0, result.err
    newer = result.out.splitlines()
    assert not newer, f"{len(newer)} files newer than the image's created time ({image.created}), e.g.:\n" + "\n".join(
        newer[:20]
    )


def test_python_bytecode_is_hash_based(container: Container) -> None:
    """pip compiled with SOURCE_DATE_EPOCH set: .pyc files carry the source's hash, not its time (PEP 552)."""
    script = (
        "import pathlib, sys; pycs = sorted(pathlib.Path(sys.prefix).rglob('*.pyc'))[:2000]; "
        "timed = [str(p) for p in pycs if int.from_bytes(p.read_bytes()[4:8], 'little') == 0]; "
        "print(len(pycs), len(timed)); print(*timed[:10], sep='\\n')"
    )
    out = container.root.check_output(f"{VENV}/bin/python -c %s", script).splitlines()
    total, timed = map(int, out[0].split())
    assert total > 100, f"only {total} .pyc files in the venv"
    assert timed == 0, f"{timed} of {total} .pyc files are timestamp-based, e.g.:\n" + "\n".join(out[1:])


def test_the_image_keeps_its_lock(container: Container, image: Image) -> None:
    if image.label("locked") != "true":
        pytest.skip("this cell is not locked (its packages are on an index that was not reachable when locking)")
    lock = container.root.file(f"{VENV}/requirements.lock")
    assert lock.exists and "--hash=sha256:" in lock.content_string

    def name(text: str) -> str:  # PEP 503: the lock and `pip list` spell some names differently
        return re.sub(r"[-_.]+", "-", text).lower()

    installed = {name(n): v for n, v in pip_packages(container).items()}
    pinned = dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?) ", lock.content_string, re.MULTILINE))
    wrong = {n: (v, installed.get(name(n))) for n, v in pinned.items() if installed.get(name(n)) != v}
    assert not wrong, f"installed versions that differ from the lock (lock, installed): {wrong}"


def test_no_pip_cache(container: Container) -> None:
    for cache in ("/home/dev/.cache/pip", "/root/.cache/pip"):
        left = container.root.check_output("find %s -mindepth 1 2>/dev/null | head -5 || true", cache)
        assert not left, f"pip cache left in {cache}:\n{left}"
    assert not container.root.file("/root/.cache/pip").exists, "/root/.cache/pip exists"


def test_no_installer_leftovers_and_nothing_world_writable_in_the_venv(container: Container) -> None:
    """uv (the locked steps' installer) leaves neither its cache nor the venv's lock file (world-writable) behind."""
    cache = container.root.check_output(
        "find /home/dev/.cache/uv /mnt/uv-cache -mindepth 1 2>/dev/null | head -5 || true"
    )
    assert not cache, f"uv's cache left in the image:\n{cache}"
    assert not container.root.file("/opt/venv/.lock").exists, "uv's /opt/venv/.lock is in the image"
    writable = container.root.check_output("find /opt/venv -perm -0002 ! -type l | head -5")
    assert not writable, f"world-writable in /opt/venv:\n{writable}"


def test_no_secrets_left(container: Container) -> None:
    secrets = container.root.check_output("find /run/secrets /mnt/secrets -mindepth 1 2>/dev/null | head -5 || true")
    assert not secrets, f"secret files in the image:\n{secrets}"
    for netrc in ("/home/dev/.netrc", "/root/.netrc"):
        assert not container.root.file(netrc).exists, f"{netrc} is in the image"
    pip_cert = container.host.check_output('printf %s "${PIP_CERT:-}"')
    assert not pip_cert, f"PIP_CERT={pip_cert} is set in the image's environment"


# A PEM certificate block, not a mention of the marker in code (ssl.py, urllib3 have the marker as a constant).
CERT_SCAN = r"""
import glob, json, os, re, subprocess
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s*\n([A-Za-z0-9+/=\s]+?)-----END CERTIFICATE-----")
SYSTEM = ("/etc/ssl/", "/usr/lib/ssl/", "/usr/share/ca-certificates/", "/etc/ca-certificates/")
found = subprocess.run(
    "find / -xdev -type f -print0 | xargs -0 -r grep -lIZ -s -F -e '-----BEGIN CERTIFICATE-----'",
    shell=True, capture_output=True).stdout.split(b"\0")
shipped = set()  # files a Debian package or a wheel put there
for listing in glob.glob("/var/lib/dpkg/info/*.list"):
    with open(listing, "rb") as handle:
        shipped.update(os.path.realpath(line.strip().decode(errors="replace")) for line in handle if line.strip())
for record in glob.glob("/opt/venv/lib/python3*/site-packages/*.dist-info/RECORD") + glob.glob(
        "/usr/lib/python3/dist-packages/*.dist-info/RECORD"):
    site = os.path.dirname(os.path.dirname(record))
    with open(record, encoding="utf-8", errors="replace") as handle:
        shipped.update(os.path.realpath(os.path.join(site, row.split(",")[0])) for row in handle if row.strip())
def blocks(path):
    with open(path, "rb") as handle:
        return {re.sub(rb"\s", b"", b) for b in PEM.findall(handle.read())}
stray = []
for raw in filter(None, found):
    path = raw.decode(errors="replace")
    if not blocks(path) or path.startswith(SYSTEM) or os.path.realpath(path) in shipped:
        continue
    stray.append(path)
# The trust store may hold only Debian's CAs: a build CA added to it would be trusted forever.
debian = set()
for path in glob.glob("/usr/share/ca-certificates/**/*.crt", recursive=True):
    debian |= blocks(path)
bundle = "/etc/ssl/certs/ca-certificates.crt"
extra = len(blocks(bundle) - debian) if os.path.exists(bundle) else 0
print(json.dumps({"stray": sorted(stray), "extra_in_bundle": extra}))
"""


def test_no_certificate_outside_the_trust_store(container: Container) -> None:
    """The build-time CA (secret pip_ca) must be nowhere: every PEM certificate comes from Debian or a wheel."""
    out = container.root.run("python3 -c %s", CERT_SCAN, timeout=240)
    assert out.rc == 0, f"certificate scan failed:\n{out.stderr[-2000:]}"
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert not found["stray"], f"certificates in files no package shipped: {found['stray']}"
    assert found["extra_in_bundle"] == 0, (
        f"/etc/ssl/certs/ca-certificates.crt holds {found['extra_in_bundle']} CA(s) not shipped by Debian"
    )


SECRET_PATTERNS = {
    "a PEM block": re.compile(r"-----BEGIN [A-Z ]+-----"),
    "a password": re.compile(r"passw(or)?d", re.IGNORECASE),
    "netrc content": re.compile(r"\bmachine\s+\S+\s+(login|password)\b"),
    "credentials in a URL": re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),
    # HF_TOKEN=..., GITHUB_TOKEN=..., AWS_SECRET_ACCESS_KEY=..., PIP_API_KEY=...: a value, not an empty ARG.
    "a token": re.compile(r"\w*(token|secret|api[_-]?key)\w*=[^\s$]", re.IGNORECASE),
}
# Paths that look like secret material; /mnt/secrets/<id> (where the build mounts a secret, in a tmpfs) is the only
# one allowed.
SECRET_PATH = re.compile(r"(?:~|/)[\w./-]*(?:secret|netrc|\.pem|\.crt|\.key\b|credential)[\w./-]*", re.IGNORECASE)


def test_history_and_config_hold_no_secrets(image: Image, docker: Docker) -> None:
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", image.ref).out
    config = json.dumps({"Env": image.config.get("Env"), "Labels": image.labels})
    for where, text in (("docker history", history), ("image config", config)):
        for what, pattern in SECRET_PATTERNS.items():
            match = pattern.search(text)
            assert match is None, f"{where} of {image.ref} contains {what}: ...{match.group(0)}..."
        paths = sorted({p for p in SECRET_PATH.findall(text) if not p.startswith("/mnt/secrets/")})
        assert not paths, f"{where} of {image.ref} names secret files other than /mnt/secrets/*: {paths}"


# ---------------------------------------------------------------------------------------------
# Mirrors.
# ---------------------------------------------------------------------------------------------


def apt_hosts(container: Container) -> set[str]:
    text = container.host.check_output("cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true")
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    return set(re.findall(r"https?://([^/\s:]+)", "\n".join(lines)))


def pip_index(container: Container) -> str | None:
    """The index-url pip's configuration sets (any scope), None for pip's upstream default."""
    out = container.host.check_output(f"{VENV}/bin/python -m pip config list")
    match = re.search(r"^[\w:.]*index-url='([^']*)'", out, re.MULTILINE)
    return match.group(1) if match else None


def build_args(docker: Docker, image: Image) -> dict[str, str]:
    """The build arguments BuildKit recorded in the RUN steps (`RUN |5 APT_MIRROR=... /bin/bash ...`)."""
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", image.ref).out
    return dict(
        re.findall(r"\b([A-Z][A-Z0-9_]*)=(\S*)", "\n".join(h for h in history.splitlines() if h.startswith("RUN |")))
    )


def base_apt_hosts(docker: Docker, image: Image, family: str) -> set[str]:
    """The apt hosts the cell's base image itself uses: what `none` must leave untouched."""
    if family in UPSTREAM_APT_HOSTS:
        return UPSTREAM_APT_HOSTS[family]
    base = image.label("base.name", prefix="org.opencontainers.image.")
    listing = docker(
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        base,
        "-c",
        "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null; true",
    ).out
    lines = [line.split("#", 1)[0] for line in listing.splitlines()]
    return set(re.findall(r"https?://([^/\s:]+)", "\n".join(lines)))


def test_mirror_profile_is_applied(container: Container, image: Image, cell: dict[str, Any], docker: Docker) -> None:
    profile, family = image.label("mirror-profile"), os_family(cell)
    upstream = base_apt_hosts(docker, image, family)
    hosts = apt_hosts(container) - {NVIDIA_APT_HOST}
    assert hosts, "no http(s) apt source found in /etc/apt/sources.list{,.d/*}"
    has_pip_conf = container.host.file("/etc/pip.conf").exists
    if profile == "none":
        assert not has_pip_conf, "mirror profile none, yet /etc/pip.conf exists"
        assert pip_index(container) is None, "mirror profile none, yet pip config sets an index-url"
        assert hosts <= upstream, f"mirror profile none, yet apt uses {sorted(hosts - upstream)}"
    elif profile == "host":
        # The build machine's own apt mirror replaces Debian's; PyPI stays upstream (mirrors.resolve). That
        # mirror may be <debian-default-mirror> itself, so compare with what the build was given, not with upstream.
        assert pip_index(container) is None, "mirror profile host sets no pip index, yet pip config has one"
        if family == "debian":
            args = build_args(docker, image)
            given = {
                m
                for key in ("APT_MIRROR", "APT_SECURITY_MIRROR")
                for m in re.findall(r"https?://([^/\s:]+)", args.get(key, ""))
            }
            assert given, f"mirror profile host, yet the build got no APT_MIRROR (build args {args})"
            assert hosts <= given, f"mirror profile host: apt uses {sorted(hosts)}, the build was given {sorted(given)}"
    else:
        from dlimages.model.spec import load_matrix

        spec = load_matrix(REPO / "matrix.yaml").mirrors.get(profile)
        assert spec is not None, f"label mirror-profile={profile!r} is not a profile in matrix.yaml"
        if spec.pypi:
            assert has_pip_conf, f"mirror profile {profile}, yet no /etc/pip.conf"
            assert pip_index(container) == spec.pypi, (
                f"pip index {pip_index(container)}, profile {profile}: {spec.pypi}"
            )
        if spec.apt is not None:
            mirror = re.findall(r"https?://([^/\s:]+)", getattr(spec.apt, family))[0]
            assert mirror in hosts, f"mirror profile {profile}: apt uses {sorted(hosts)}, not {mirror}"
            assert not hosts & upstream, f"mirror profile {profile}, yet apt still uses {sorted(hosts & upstream)}"


# ---------------------------------------------------------------------------------------------
# Entrypoint and signals.
# ---------------------------------------------------------------------------------------------

PROCESS_TABLE = r"""
import json, os
rows = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [a.decode() for a in handle.read().split(b"\0") if a]
        with open(f"/proc/{pid}/stat") as handle:
            ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        continue
    rows.append({"pid": int(pid), "ppid": ppid, "argv": argv})
print(json.dumps(rows))
"""


def test_tini_is_pid_1_and_execs_the_command(container: Container) -> None:
    processes = container.python_json(PROCESS_TABLE)
    init = next(p for p in processes if p["pid"] == 1)
    assert Path(init["argv"][0]).name == "tini", f"PID 1 is {init['argv']}, not tini"
    children = [p["argv"] for p in processes if p["ppid"] == 1]
    # dl-entrypoint must exec: the command itself, not a shell around it, is tini's child and gets the signals.
    assert ["sleep", "infinity"] in children, f"tini's children are {children}, not `sleep infinity` itself"


def wait_for_log(docker: Docker, name: str, needle: str, limit_s: float = 60) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        result = docker("logs", name)
        logs = result.out + result.err
        if needle in logs:
            return logs
        state = docker("inspect", "-f", "{{.State.Running}}", name).out.strip()
        assert state == "true", f"{name} exited before logging {needle!r}:\n{logs[-3000:]}"
        time.sleep(0.5)
    pytest.fail(f"{name} did not log {needle!r} within {limit_s:.0f} s", pytrace=False)


def test_docker_stop_of_jupyterlab_is_fast(image: Image, docker: Docker) -> None:
    with docker.started(image.ref, purpose="stop") as name:
        wait_for_log(docker, name, "is running at")
        started = time.monotonic()
        docker("stop", "-t", "10", name, timeout=30)
        elapsed = time.monotonic() - started
        code = int(docker("inspect", "-f", "{{.State.ExitCode}}", name).out.strip())
    assert elapsed < STOP_LIMIT_S, (
        f"`docker stop -t 10` took {elapsed:.2f} s (limit {STOP_LIMIT_S} s): SIGTERM ignored?"
    )
    assert code in (0, 143), f"JupyterLab exited {code} on SIGTERM (stopped in {elapsed:.2f} s)"


# ---------------------------------------------------------------------------------------------
# The in-image commands, on a machine without a GPU.
# ---------------------------------------------------------------------------------------------


def test_dl_smoke_skips_without_gpu(image: Image, docker: Docker) -> None:
    result = docker.run_once(image.ref, "dl-smoke", "--json", options=NO_GPU)
    assert result.code == EXIT_SKIPPED, f"dl-smoke exited {result.code}, not 77:\n{result.err[-2000:]}"
    report = json.loads(result.out)
    assert report["status"] == "skipped"
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert not failed, f"dl-smoke checks that fail even without a GPU (version checks against cell.json): {failed}"


def test_dl_smoke_usage_error(image: Image, docker: Docker) -> None:
    result = docker.run_once(image.ref, "dl-smoke", "--bogus", options=NO_GPU)
    assert result.code == EXIT_USAGE, f"dl-smoke --bogus exited {result.code}:\n{result.err}"


def test_dl_bench_skips_without_gpu(image: Image, docker: Docker) -> None:
    if image.label("framework") != "pytorch":
        pytest.skip("dl-bench benchmarks PyTorch only")
    result = docker.run_once(image.ref, "dl-bench", options=NO_GPU)
    assert result.code == EXIT_SKIPPED, f"dl-bench exited {result.code}, not 77:\n{result.err[-2000:]}"


def test_the_oci_labels_users_tools_read(image: Image) -> None:
    """created is the commit's time (the image's own `created`), licenses names the framework's licence and not the
    project's, vendor names the publisher (matrix.yaml)."""
    oci = "org.opencontainers.image."
    created = datetime.datetime.fromisoformat(image.label("created", oci).replace("Z", "+00:00"))
    assert created == datetime.datetime.fromisoformat(image.created.replace("Z", "+00:00")), image.created
    framework = image.label("framework")
    expected = {"pytorch": "BSD-3-Clause", "tensorflow": "Apache-2.0"}[framework]
    licenses = image.label("licenses", oci).split(" AND ")
    assert licenses[0] == expected and "LicenseRef-NVIDIA-CUDA" in licenses
    assert image.label("vendor", oci)


def test_the_sbom_names_the_debian_packages_as_scanners_match_them(container: Container, image: Image) -> None:
    """The SBOM a signed push attaches, made from this image as the push makes it: each installed Debian package's
    purl, parsed by packageurl-python (the purl reference implementation), is pkg:deb/ID/NAME@VERSION with
    `distro=ID-VERSION_ID` from the image's own os-release, which is how scanners match Debian and Ubuntu
    advisories. (Debian's /etc/os-release is a relative symlink: it used to be lost, giving `pkg:deb/linux/...`.)"""
    from packageurl import PackageURL

    from dlimages.publish import attest
    from dlimages.publish.signing import image_facts

    os_id, version_id = container.host.check_output(". /etc/os-release && echo $ID $VERSION_ID").split()
    listed = container.host.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Architecture}\\n'")
    arches = {name: arch for status, name, arch in map(str.split, listed.splitlines()) if status in ("ii", "hi")}
    document = json.loads(attest.sbom(image_facts(image.ref, REPO)))
    purls = [component.get("purl", "") for component in document["components"]]
    debs = [PackageURL.from_string(purl) for purl in purls if purl.startswith("pkg:deb/")]
    assert {purl.name for purl in debs} == set(arches) and arches
    distro = f"{os_id}-{version_id}"
    wrong = [
        purl.to_string()
        for purl in debs
        if (purl.namespace, purl.qualifiers.get("distro"), purl.qualifiers.get("arch"))
        != (os_id, distro, arches[purl.name])
    ]
    assert not wrong, f"{len(wrong)} of {len(debs)} Debian packages have purls scanners cannot match: {wrong[:3]}"
