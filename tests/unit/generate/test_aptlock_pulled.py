"""OS package locks of the cells on pulled bases (ubuntu, nvidia/cuda) without network or engine: only a base
recorded by digest is locked on, on the packages that very base has installed (its dpkg status, read with
`docker run`), from its distribution's archive; `lock --check` judges those locks; builds take their files from
the Ubuntu archive, a snapshot archive or a repository."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts import oslock
from dlimages.artifacts.baseslock import BaseLock
from dlimages.artifacts.layout import cell_dir
from dlimages.artifacts.oslock import APT_LOCK, AptLock, Deb, Distro
from dlimages.building import aptdebs
from dlimages.core.runner import Runner
from dlimages.generate import aptlock, aptpulled
from dlimages.model.cells import Cell

DIGEST = "sha256:" + "b" * 64
JAMMY = "ubuntu:22.04"
STATUS = "Package: libc6\nStatus: install ok installed\nVersion: 2.35-0ubuntu3.8\nArchitecture: amd64\n\n"
PACKAGES = ["curl", "zsh"]


def deb(name: str, version: str, archive: str = "ubuntu") -> Deb:
    path = f"pool/main/{name[0]}/{name}/{name}_{version}_amd64.deb"
    return Deb(name, version, archive, path, 100, hashlib.sha256(name.encode()).hexdigest())


DEBS = (deb("curl", "7.81.0-1ubuntu1.20"), deb("libc6", "2.35-0ubuntu3.9"), deb("zsh", "5.8.1-1"))


class FakeTools:
    """`docker run ... cat /var/lib/dpkg/status` and apt-get as aptlock runs them."""

    def __init__(self, *, docker_fails: bool = False) -> None:
        self.docker_fails = docker_fails
        self.calls: list[list[str]] = []
        self.status_seen: list[str] = []
        self.sources_seen: list[str] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[0] == "docker":
            if self.docker_fails:
                return subprocess.CompletedProcess(argv, 125, "", "Unable to find image 'ubuntu:22.04@sha256:bbb'\n")
            return subprocess.CompletedProcess(argv, 0, STATUS, "")
        config = Path(kwargs["env"]["APT_CONFIG"])
        if argv[1] == "update":
            self.status_seen.append((config.parent / "status").read_text())
            self.sources_seen.append((config.parent / "sources/archive.sources").read_text())
            return subprocess.CompletedProcess(argv, 0, "", "")
        if "-s" in argv:
            # libc6 is the base's, upgraded: apt names the installed version in brackets
            out = "".join(
                f"Inst {d.name} {'[2.35-0ubuntu3.8] ' if d.name == 'libc6' else ''}"
                f"({d.version} Ubuntu:22.04/jammy-updates [amd64])\n"
                for d in DEBS
            )
        else:
            out = "".join(
                f"'http://archive.ubuntu.com/ubuntu/{d.path}' {d.filename} {d.size} SHA256:{d.sha256}\n" for d in DEBS
            )
        return subprocess.CompletedProcess(argv, 0, out, "")


def cells(real_expansion: Any) -> list[Cell]:
    return [cell for cell in real_expansion.cells if cell.base_image == JAMMY]


def test_an_ubuntu_release_resolves_from_its_archive_with_its_keyring_and_every_component() -> None:
    jammy = Distro.of("ubuntu22.04", "ubuntu", "jammy")
    assert dict(jammy.archives) == {"ubuntu": ("jammy", "jammy-updates", "jammy-security")}
    assert jammy.keyring == "/usr/share/keyrings/ubuntu-archive-keyring.gpg"
    trixie = Distro.of("debian13", "debian", "trixie")
    assert dict(trixie.archives) == {"debian": ("trixie", "trixie-updates"), "debian-security": ("trixie-security",)}
    assert trixie.keyring == "/usr/share/keyrings/debian-archive-keyring.gpg" and trixie.components == ("main",)
    tools = FakeTools()
    lock = aptlock.resolve_on(jammy, PACKAGES, f"{JAMMY}@{DIGEST}", STATUS, dict(jammy.public), Runner(run=tools))
    assert tools.status_seen == [STATUS]  # resolved on what the base has installed
    assert "Components: main restricted universe multiverse\n" in tools.sources_seen[0]
    assert "Suites: jammy jammy-updates jammy-security\n" in tools.sources_seen[0]
    assert "URIs: http://archive.ubuntu.com/ubuntu\n" in tools.sources_seen[0]
    assert lock.debs == DEBS
    assert lock.base == f"{JAMMY}@{DIGEST}" and lock.os == "ubuntu22.04 (jammy, amd64)"
    again = AptLock.parse(lock.text(), "apt.lock")
    assert again == lock and again.codename == "jammy" and oslock.distro_of(again) == jammy


def test_only_cells_on_a_base_recorded_by_digest_are_locked(tmp_path: Path, real_expansion: Any) -> None:
    tools = FakeTools()
    chosen = cells(real_expansion)
    unpinned = aptpulled.lock_pulled(tmp_path, chosen, PACKAGES, BaseLock({}), Runner(run=tools), upgrade=False)
    assert unpinned == ["apt not locked on 1 pulled bases with no digest recorded (`invoke bases --lock` first)"]
    assert tools.calls == []
    recorded = BaseLock({JAMMY: DIGEST})
    lines = aptpulled.lock_pulled(tmp_path, chosen, PACKAGES, recorded, Runner(run=tools), upgrade=False)
    assert lines == [f"{JAMMY}@{DIGEST}: 3 packages, for {len(chosen)} cells"]
    ref = f"{JAMMY}@{DIGEST}"
    assert tools.calls[0] == ["docker", "run", "--rm", "--entrypoint", "cat", ref, "/var/lib/dpkg/status"]
    for cell in chosen:
        assert oslock.stale(tmp_path, cell_dir(tmp_path, cell) / APT_LOCK, PACKAGES, ("ubuntu22.04", ref)) == ""
    assert aptpulled.pulled_problems(tmp_path, chosen, PACKAGES, recorded) == []
    # up to date: the base is not even read again
    calls = len(tools.calls)
    assert aptpulled.lock_pulled(tmp_path, chosen, PACKAGES, recorded, Runner(run=tools), upgrade=False) == []
    assert len(tools.calls) == calls


def test_a_base_recorded_anew_makes_its_cells_locks_stale(tmp_path: Path, real_expansion: Any) -> None:
    chosen = cells(real_expansion)
    aptpulled.lock_pulled(tmp_path, chosen, PACKAGES, BaseLock({JAMMY: DIGEST}), Runner(run=FakeTools()), upgrade=False)
    moved = BaseLock({JAMMY: "sha256:" + "c" * 64})
    problems = aptpulled.pulled_problems(tmp_path, chosen, PACKAGES, moved)
    assert len(problems) == len(chosen)
    assert f"the OS package lock is resolved on another base than {JAMMY}@sha256:ccc" in problems[0].message
    assert problems[0].message.endswith("run `invoke lock --upgrade-apt`")


def test_a_base_that_cannot_be_read_is_said_and_writes_nothing(tmp_path: Path, real_expansion: Any) -> None:
    chosen = cells(real_expansion)
    lines = aptpulled.lock_pulled(
        tmp_path, chosen, PACKAGES, BaseLock({JAMMY: DIGEST}), Runner(run=FakeTools(docker_fails=True)), upgrade=True
    )
    assert lines == [
        f"NOT locked, the cells on {JAMMY}@{DIGEST}: cannot read its installed packages: "
        "Unable to find image 'ubuntu:22.04@sha256:bbb'"
    ]
    assert not any((cell_dir(tmp_path, cell) / APT_LOCK).exists() for cell in chosen)


@pytest.mark.parametrize(
    ("value", "urls"),
    [
        (None, {"ubuntu": "http://archive.ubuntu.com/ubuntu"}),
        (
            "https://snapshot.example.org/{archive}/{time}",
            {"ubuntu": "https://snapshot.example.org/ubuntu/20261201T000000Z"},
        ),
        ("http://127.0.0.1:8080/", {"ubuntu": "http://127.0.0.1:8080/ubuntu"}),
    ],
)
def test_an_ubuntu_cells_files_come_from_the_ubuntu_archive_its_snapshot_or_a_repository(
    value: str | None, urls: dict[str, str]
) -> None:
    jammy = Distro.of("ubuntu22.04", "ubuntu", "jammy")
    assert dict(aptdebs.origin(value, "20261201T000000Z", aptdebs.mirrors_of(None, None, jammy), jammy).urls) == urls
    tuna = aptdebs.mirrors_of("http://mirrors.example.org/ubuntu/", None, jammy)
    assert aptdebs.origin(None, "20261201T000000Z", tuna, jammy).urls == {
        "ubuntu": "http://mirrors.example.org/ubuntu/"
    }
    snapshot = aptdebs.origin("https://snapshot.example.org/{archive}/{time}", "20261201T000000Z", None, jammy)
    assert snapshot.describe() == (
        "the snapshot archive at 20261201T000000Z (https://snapshot.example.org/ubuntu/20261201T000000Z)"
    )
