"""The offline base, without an engine: the make-base.sh command line and which bases a build still needs."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlimages.build.base import make_base_argv, missing_bases
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner


def test_mirror_given_or_read_from_the_hosts_apt_sources(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.example.org/debian\nSuites: bookworm\n")
    root = Path("/repo")
    assert make_base_argv(root, "http://m.example.net/debian") == [
        "bash", "/repo/scripts/make-base.sh", "--mirror", "http://m.example.net/debian",
    ]  # fmt: skip
    assert make_base_argv(root, sources=[sources], check=True) == [
        "bash", "/repo/scripts/make-base.sh", "--mirror", "http://deb.example.org/debian",
        "--security-mirror", "http://deb.example.org/debian-security", "--check",
    ]  # fmt: skip


def test_a_host_whose_apt_sources_name_no_debian_mirror_takes_debians_public_archive_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GitHub's Ubuntu runners: apt sources, but none of Debian's.
    ubuntu = tmp_path / "ubuntu.sources"
    ubuntu.write_text("Types: deb\nURIs: http://azure.archive.ubuntu.com/ubuntu/\nSuites: noble\n")
    with caplog.at_level(logging.INFO, logger="dlimages.build.base"):
        for sources in ([ubuntu], [tmp_path / "absent"]):
            assert make_base_argv(Path("/repo"), sources=sources) == [
                "bash", "/repo/scripts/make-base.sh", "--mirror", "http://ftp.debian.org/debian",
                "--security-mirror", "http://security.debian.org/debian-security",
            ]  # fmt: skip
    assert (
        caplog.messages
        == ["note: this host's apt sources name no Debian mirror: the base comes from http://ftp.debian.org/debian"] * 2
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


SHELL_CHARACTER = "has ';' in its path (query strings, fragments and shell characters are not allowed)"
CREDENTIALS = "carries credentials (user:password@): give them with --netrc FILE (a BuildKit secret) instead"


@pytest.mark.parametrize(
    ("mirror", "problem"),
    [
        ("http://x/;id>/dev/stderr;#", SHELL_CHARACTER),
        ("https://u:p@deb.example.org/debian", CREDENTIALS),
        ("deb.example.org/debian", "is not an http:// or https:// URL"),
        ("", "is empty"),
    ],
    ids=["shell", "credentials", "no-scheme", "empty"],
)
def test_a_bad_mirror_flag_is_an_input_error(mirror: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        make_base_argv(Path("/repo"), mirror)
    assert caught.value.report() == f"error: --mirror: the URL {problem} (allowed: {URL_ALLOWED})"


def test_a_hostile_mirror_in_the_hosts_apt_sources_is_an_input_error(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://x/$(id)/debian\nSuites: bookworm\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        make_base_argv(Path("/repo"), sources=[sources])
    assert caught.value.report().startswith(
        f"error: {sources}:2: this host's Debian mirror (read for --mirror) has '$' in its path"
    )


def test_invoke_base_refuses_a_bad_mirror_with_exit_2(repo_copy: Path) -> None:
    # Before any command runs (the copy has no scripts/make-base.sh: a run would fail differently).
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "base", "--mirror", "http://x/;id>/dev/stderr;#"],
        cwd=repo_copy,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: --mirror: the URL has ';' in its path" in result.stderr
    assert "uid=" not in result.stdout + result.stderr and "Traceback" not in result.stderr
