"""The offline bases, without an engine: the make-base.sh command line, where the packages come from, which bases a
build still needs and which `invoke base --os` makes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts import oslock
from dlimages.building.base import base_lock, created_by, make_base_argv, missing_bases
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner

LOCK_TEXT = (
    "# Part: the offline Debian 12 base\n# Os: debian12 (bookworm, amd64)\n# Resolved: 20261201T000000Z\n"
    f"# Input: sha256:{'0' * 64}\napt=2.6.1 debian pool/main/a/apt/apt_2.6.1_amd64.deb 10 sha256:{'a' * 64}\n"
)
DEBIAN12 = oslock.Distro.of("debian12", "debian", "bookworm")


def _root(tmp_path: Path) -> Path:
    (tmp_path / "images").mkdir()
    (tmp_path / "images/base-debian12.apt.lock").write_text(LOCK_TEXT)
    return tmp_path


def test_the_base_is_made_from_the_flat_repository_of_its_lock(tmp_path: Path) -> None:
    lock = oslock.AptLock.parse(LOCK_TEXT, "lock")
    argv = make_base_argv(Path("/repo"), Path("/repo/.work/apt/repo/x"), lock, check=True)
    assert argv == [
        "bash", "/repo/scripts/make-base.sh", "--repo", "/repo/.work/apt/repo/x", "--os", "debian12",
        "--suite", "bookworm", "--out", "/repo/.work/base", "--epoch", "1747699200",
        "--archive", oslock.DEBIAN_PUBLIC["debian"], "--security-archive", oslock.DEBIAN_PUBLIC["debian-security"],
        "--check",
    ]  # fmt: skip
    trixie = oslock.AptLock.parse(LOCK_TEXT.replace("debian12 (bookworm", "debian13 (trixie"), "lock")
    argv = make_base_argv(Path("/repo"), Path("/repo/x"), trixie)
    assert argv[4:8] == ["--os", "debian13", "--suite", "trixie"]


def test_the_bases_history_names_its_lock_and_nothing_of_this_machine() -> None:
    # Part of the image ID: the words make-base.sh wrote before the archive moved into the package, unchanged.
    lock = oslock.AptLock.parse(LOCK_TEXT, "lock")
    assert created_by(lock) == (
        f"mmdebstrap --mode=root --variant=essential --format=tar bookworm, every package of base-debian12.apt.lock "
        f"{lock.digest()} (merged-usr hook; man, doc, locale, info excluded; SOURCE_DATE_EPOCH=1747699200)"
    )


def test_the_bases_packages_come_from_the_hosts_mirror_else_debians_own(tmp_path: Path) -> None:
    root = _root(tmp_path)
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.example.org/debian\nSuites: bookworm\n")
    assert base_lock(root, DEBIAN12, None, [sources]).origin.urls == {
        "debian": "http://deb.example.org/debian", "debian-security": "http://deb.example.org/debian-security",
    }  # fmt: skip
    # GitHub's Ubuntu runners: apt sources, but none of Debian's.
    ubuntu = tmp_path / "ubuntu.sources"
    ubuntu.write_text("Types: deb\nURIs: http://azure.archive.ubuntu.com/ubuntu/\nSuites: noble\n")
    assert base_lock(root, DEBIAN12, None, [ubuntu]).origin.urls == {
        "debian": "http://ftp.debian.org/debian", "debian-security": "http://security.debian.org/debian-security",
    }  # fmt: skip
    snapshot = base_lock(root, DEBIAN12, "https://snapshot.example.org/archive/{archive}/{time}", [ubuntu]).origin
    assert snapshot.urls["debian"] == "https://snapshot.example.org/archive/debian/20261201T000000Z"


def test_without_a_base_lock_invoke_base_names_the_command_that_writes_it(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        base_lock(tmp_path, DEBIAN12, None, [])
    assert caught.value.report() == (
        "error: images/base-debian12.apt.lock: missing (allowed: `invoke lock --upgrade-apt` writes it)"
    )


def test_only_missing_local_bases_are_named_once() -> None:
    asked: list[str] = []

    def inspect(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        asked.append(argv[-1])
        there = argv[-1] == "dlimages/base:present"
        return subprocess.CompletedProcess(argv, 0 if there else 1, "sha256:1" if there else "", "No such image")

    wanted = ["dlimages/base:debian12", "dlimages/base:present", "dlimages/base:debian12"]
    assert missing_bases(wanted, Runner(inspect)) == ["dlimages/base:debian12"]
    assert asked == ["dlimages/base:debian12", "dlimages/base:present"]  # each looked up once


URL_ALLOWED = "http(s)://host[:port]/path with letters, digits and . _ ~ + = , - / %XX"


def test_a_hostile_mirror_in_the_hosts_apt_sources_is_an_input_error(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://x/$(id)/debian\nSuites: bookworm\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        base_lock(_root(tmp_path), DEBIAN12, None, [sources])
    assert caught.value.report().startswith(
        f"error: {sources}:2: this host's Debian mirror (read for --mirror) has '$' in its path"
    )


def test_invoke_base_refuses_a_bad_apt_from_with_exit_2(repo_copy: Path) -> None:
    # Before any command runs (the copy has no scripts/make-base.sh: a run would fail differently).
    _root(repo_copy)
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "base", "--apt-from", "http://x/;id>/dev/stderr;#"],
        cwd=repo_copy,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: --apt-from: the URL has ';' in its path" in result.stderr
    assert "uid=" not in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_a_base_made_from_another_lock_than_its_own_is_made_again() -> None:
    twelve = oslock.AptLock.parse(LOCK_TEXT, "12")
    thirteen = oslock.AptLock.parse(LOCK_TEXT.replace("debian12 (bookworm", "debian13 (trixie"), "13")

    def engine(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        history = f"mmdebstrap ... every package of base-debian12.apt.lock {twelve.digest()}"
        return subprocess.CompletedProcess(argv, 0, history if argv[1] == "history" else "sha256:1", "")

    locks = {"dlimages/base:debian12": twelve, "dlimages/base:debian13": thirteen}
    assert missing_bases(list(locks), Runner(engine), locks) == ["dlimages/base:debian13"]


@pytest.mark.parametrize("value", ["debian14", "ubuntu22.04"])
def test_invoke_base_os_names_the_oses_it_makes_bases_of_with_exit_2(repo_copy: Path, value: str) -> None:
    _root(repo_copy)
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "base", "--os", value],
        cwd=repo_copy,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == f"error: --os: {value!r} has no base made here (allowed: debian12)"
