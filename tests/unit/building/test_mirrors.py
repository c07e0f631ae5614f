"""Mirror profiles of the fixture matrix resolved into one cell's build arguments, and the host's own apt sources
(both formats)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlimages.building.mirrors import MirrorArgs, debian_mirrors, resolve
from dlimages.core.errors import InputError
from dlimages.model.cells import Cell
from dlimages.model.spec import Matrix

CellLookup = Callable[[str, str], Cell]

TORCH_CU118 = ("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")  # ubuntu22.04, PyTorch's cu118 index
TORCH_DEBIAN = ("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime")  # debian12, PyPI's default wheel
TORCH_FIND_LINKS = ("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime")  # ubuntu20.04, torch_stable.html
TF_BASE = ("tensorflow", "cuda11.8-tf2.13.1-py3.10-runtime")  # nvidia/cuda base

DEB822 = """\
# Managed by hand.
Types: deb
URIs: http://mirror.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security/
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# deb http://commented.example.org/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://one.example.net/debian bookworm main
deb-src http://source.example.net/debian bookworm main
deb http://one.example.net/debian-security bookworm-security main  # security
deb file:/srv/local-repo ./
"""


@pytest.fixture
def deb822_sources(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "sources.list.d"
    folder.mkdir()
    (folder / "debian.sources").write_text(DEB822, encoding="utf-8")
    (folder / "notes.txt").write_text("deb http://ignored.example.org/debian bookworm main\n", encoding="utf-8")
    return [tmp_path / "sources.list", folder]  # sources.list does not exist, as on a fresh Debian 12


def test_host_mirrors_read_from_deb822(deb822_sources: list[Path]) -> None:
    assert debian_mirrors(deb822_sources) == (
        "http://mirror.example.org/debian",
        "http://mirror.example.org/debian-security/",
    )


def test_host_mirrors_read_from_the_one_line_format(tmp_path: Path) -> None:
    sources = tmp_path / "sources.list"
    sources.write_text(ONE_LINE, encoding="utf-8")
    assert debian_mirrors([sources, tmp_path / "missing.d"]) == (
        "http://one.example.net/debian",
        "http://one.example.net/debian-security",
    )


def test_host_mirrors_are_the_first_in_file_order(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(ONE_LINE, encoding="utf-8")
    folder = tmp_path / "sources.list.d"
    folder.mkdir()
    (folder / "b.sources").write_text(DEB822, encoding="utf-8")
    (folder / "a.list").write_text("deb http://one.example.net/debian bookworm contrib\n", encoding="utf-8")
    assert debian_mirrors([tmp_path / "sources.list", folder]) == (
        "http://one.example.net/debian",
        "http://one.example.net/debian-security",
    )


@pytest.mark.parametrize(
    ("sources", "apt", "security"),
    [
        pytest.param(
            {"sources.list.d/debian.sources": DEB822},
            "http://mirror.example.org/debian",
            "http://mirror.example.org/debian-security/",
            id="given",
        ),
        pytest.param(
            {"sources.list": "deb http://mirror.example.org/debian/ bookworm main\n"},
            "http://mirror.example.org/debian/",
            "http://mirror.example.org/debian-security",
            id="derived",
        ),
    ],
)
def test_host_profile_uses_the_hosts_debian_mirror(
    matrix: Matrix, cell: CellLookup, tmp_path: Path, sources: dict[str, str], apt: str, security: str
) -> None:
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    args = resolve(matrix, "host", cell(*TORCH_DEBIAN), [tmp_path / "sources.list", tmp_path / "sources.list.d"])
    assert args == MirrorArgs("host", apt=apt, apt_security=security)
    assert args.build_args() == {"MIRROR_PROFILE": "host", "APT_MIRROR": apt, "APT_SECURITY_MIRROR": security}


def test_host_profile_keeps_upstream_for_an_ubuntu_cell(
    matrix: Matrix, cell: CellLookup, deb822_sources: list[Path]
) -> None:
    args = resolve(matrix, "host", cell(*TORCH_CU118), deb822_sources)
    assert args.build_args() == {"MIRROR_PROFILE": "host"}
    assert args.notes == ("the host's apt mirror serves Debian; ubuntu22.04 keeps its upstream apt sources",)


def test_host_profile_without_a_debian_mirror_is_an_input_error(
    matrix: Matrix, cell: CellLookup, tmp_path: Path
) -> None:
    sources = tmp_path / "sources.list"
    sources.write_text("deb http://mirror.example.org/ubuntu jammy main\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        resolve(matrix, "host", cell(*TORCH_DEBIAN), [sources])
    assert caught.value.report() == (
        "error: --mirror host: no Debian mirror found in this host's apt sources (allowed: a profile from matrix.yaml)"
    )


def test_none_profile_sets_only_the_profile_name(matrix: Matrix, cell: CellLookup) -> None:
    for lookup in (TORCH_CU118, TORCH_DEBIAN, TF_BASE):
        args = resolve(matrix, "none", cell(*lookup))
        assert args.build_args() == {"MIRROR_PROFILE": "none"}
        assert args.notes == ()


def test_a_profile_without_pytorch_wheels_says_so(matrix: Matrix, cell: CellLookup) -> None:
    args = resolve(matrix, "campus", cell(*TORCH_CU118))
    assert args.build_args() == {
        "MIRROR_PROFILE": "campus",
        "APT_MIRROR": "http://campus.example.org/ubuntu/",
        "PIP_INDEX_URL": "https://campus.example.org/pypi/simple",
    }
    assert args.notes == (
        "campus does not mirror PyTorch's cu118 wheels; they come from upstream https://download.pytorch.org/whl/cu118",
    )


def test_a_profile_on_debian_sets_both_apt_mirrors(matrix: Matrix, cell: CellLookup) -> None:
    args = resolve(matrix, "campus", cell(*TORCH_DEBIAN))
    assert (args.apt, args.apt_security) == (
        "http://campus.example.org/debian/",
        "http://campus.example.org/debian-security/",
    )
    assert args.notes == ()  # PyPI's default wheel comes through the PyPI mirror


def test_a_profile_with_pytorch_wheels_serves_them_by_find_links(matrix: Matrix, cell: CellLookup) -> None:
    args = resolve(matrix, "cloud", cell(*TORCH_CU118)).build_args()
    assert args["TORCH_FIND_LINKS"] == "https://cloud.example.net/pytorch-wheels/cu118/"
    assert args["TORCH_INDEX_URL"] == ""  # the upstream index is then not asked at all
    old = resolve(matrix, "cloud", cell(*TORCH_FIND_LINKS)).build_args()
    assert (old["TORCH_FIND_LINKS"], old["TORCH_INDEX_URL"]) == ("https://cloud.example.net/pytorch-wheels/cu110/", "")


def test_mirrors_say_they_do_not_carry_nvidias_apt_repository(matrix: Matrix, cell: CellLookup) -> None:
    args = resolve(matrix, "cloud", cell(*TF_BASE))
    assert args.notes == ("cloud does not mirror NVIDIA's CUDA apt repository; the base image keeps NVIDIA's source",)
    assert "TORCH_INDEX_URL" not in args.build_args()


def test_tensorflow_wheel_cell_gets_no_pytorch_mirror_advice(matrix: Matrix, cell: CellLookup) -> None:
    tf = cell("tensorflow", "cuda11.8-tf2.14.1-py3.10-runtime")
    assert resolve(matrix, "campus", tf).notes == ()
    assert "TORCH_FIND_LINKS" not in resolve(matrix, "cloud", tf).build_args()


def test_unknown_profile_lists_the_allowed_profiles(matrix: Matrix, cell: CellLookup) -> None:
    with pytest.raises(InputError) as caught:
        resolve(matrix, "tsinghua", cell(*TORCH_CU118))
    assert caught.value.report() == (
        "error: --mirror: unknown mirror profile 'tsinghua' (allowed: none, campus, cloud, host)"
    )


# --- The host's apt sources are input too (issue 8): they reach build arguments and make-base.sh -------------

URL_ALLOWED = "http(s)://host[:port]/path with letters, digits and . _ ~ + = , - / %XX"


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        (
            "http://x/;id>/dev/stderr;/debian",
            "has ';' in its path (query strings, fragments and shell characters are not allowed)",
        ),
        (
            "http://x/$(id)/debian",
            "has '$' in its path (query strings, fragments and shell characters are not allowed)",
        ),
        (
            "http://apt:s3cret@mirror.example.org/debian",
            "carries credentials (user:password@): give them with --netrc FILE (a BuildKit secret) instead",
        ),
    ],
    ids=["semicolon", "command-substitution", "credentials"],
)
def test_a_hostile_host_mirror_is_refused_naming_the_file(
    matrix: Matrix, cell: CellLookup, tmp_path: Path, uri: str, problem: str
) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text(f"Types: deb\nURIs: {uri}\nSuites: bookworm\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        resolve(matrix, "host", cell(*TORCH_DEBIAN), [sources])
    assert caught.value.report() == (
        f"error: {sources}:2: this host's Debian mirror (read for --mirror host) {problem} (allowed: {URL_ALLOWED})"
    )
    assert "s3cret" not in caught.value.report()


def test_a_hostile_security_mirror_is_refused_too(tmp_path: Path) -> None:
    sources = tmp_path / "sources.list"
    sources.write_text(
        "deb http://mirror.example.org/debian bookworm main\n"
        "deb http://mirror.example.org/`id`/debian-security bookworm-security main\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError) as caught:
        debian_mirrors([sources])
    assert [problem.where for problem in caught.value.problems] == [f"{sources}:2"]
    assert "has '`' in its path" in caught.value.report()
