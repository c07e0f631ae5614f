"""baselock.py without Docker or a registry: reading and writing the lock, which bases are pulled, what a build
starts FROM, and resolving a tag through a fake `skopeo` (tests/image/test_baselock_registry.py uses the real one)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlimages.artifacts.baseslock import COMMENT, COMMENT_KEY, LOCK_FILE, MAX_LOCK_BYTES, BaseLock, pulled_bases
from dlimages.core import files
from dlimages.core.errors import InputError
from dlimages.core.references import registry_is_loopback
from dlimages.core.registry import Resolved, resolve_digest, skopeo_argv
from dlimages.core.runner import Runner
from dlimages.generate.baselock import refresh
from dlimages.model.cells import Cell, Expansion

REPO = Path(__file__).resolve().parents[3]
UBUNTU = "ubuntu:22.04"
CUDA = "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"
LOCAL = "127.0.0.1:5000/ubuntu:22.04"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
FATAL = 'time="2024-01-01T00:00:00Z" level=fatal msg="Error parsing image name \\"docker://{ref}\\": {msg}"'


# --- the file ---------------------------------------------------------------------------------------------------


def load_text(tmp_path: Path, text: str | bytes) -> BaseLock:
    path = tmp_path / "bases.lock.json"
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return BaseLock.load(path)


def problems_of(tmp_path: Path, text: str | bytes) -> list[str]:
    with pytest.raises(InputError) as caught:
        load_text(tmp_path, text)
    return [str(problem) for problem in caught.value.problems]


def test_missing_file_is_an_empty_lock(tmp_path: Path) -> None:
    lock = BaseLock.load(tmp_path / "nothing.json")
    assert lock == BaseLock() and dict(lock.digests) == {}
    assert lock.pinned(UBUNTU) is None


def test_load_reads_tags_and_pinned_joins_tag_and_digest(tmp_path: Path) -> None:
    lock = load_text(tmp_path, json.dumps({COMMENT_KEY: "anything", CUDA: D1, UBUNTU: D2, LOCAL: D1}))
    assert dict(lock.digests) == {CUDA: D1, UBUNTU: D2, LOCAL: D1}
    assert lock.pinned(UBUNTU) == f"{UBUNTU}@{D2}"
    assert lock.pinned(LOCAL) == f"{LOCAL}@{D1}"
    assert lock.pinned("ubuntu:20.04") is None
    assert lock.pinned("ubuntu") is None  # no implicit :latest


def test_the_committed_lock_loads_and_is_written_as_the_code_writes_it() -> None:
    """images/bases.lock.json is what BaseLock.write makes of itself: refreshing it changes digests, not layout."""
    path = REPO / LOCK_FILE
    lock = BaseLock.load(path)
    assert path.read_text(encoding="utf-8") == lock.text()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{", ":1: is not JSON: Expecting property name enclosed in double quotes (allowed: a JSON object"),
        ('["ubuntu:22.04"]', ": is not a JSON object (allowed: a JSON object of tag -> digest)"),
        (
            json.dumps({"ubuntu": D1}),
            "key 'ubuntu': has no :tag (docker would read it as :latest, which no base should be) "
            "(allowed: '_comment' or an image reference with a :tag and no @digest, e.g. ubuntu:22.04)",
        ),
        (
            json.dumps({f"{UBUNTU}@{D1}": D1}),
            f"key '{UBUNTU}@{D1}': has an @digest: the key is the tag a digest is recorded for (allowed: ",
        ),
        (json.dumps({"Ubuntu:22.04": D1}), "key 'Ubuntu:22.04': is not an image reference: lowercase path parts"),
        (json.dumps({"-ubuntu:22.04": D1}), "key '-ubuntu:22.04': starts with '-' (docker would read it as an option)"),
        (
            json.dumps({"ubuntu:22.04 ": D1}),
            "key 'ubuntu:22.04 ': has whitespace or characters outside printable ASCII",
        ),
        (json.dumps({"ubüntu:22.04": D1}), "key 'ub\\xfcntu:22.04': has whitespace or characters outside printable"),
        (json.dumps({"_commnet": "x"}), "key '_commnet': is not a key of the lock (allowed: '_comment' or an image"),
        (json.dumps({COMMENT_KEY: ["x"]}), "key '_comment': is not a string (allowed: a text comment)"),
        (
            json.dumps({UBUNTU: "sha256:" + "A" * 64}),
            f"key '{UBUNTU}': has the value 'sha256:{'A' * 64}', not a digest "
            "(allowed: sha256: and 64 lowercase hex digits, as `invoke bases --lock` writes it)",
        ),
        (json.dumps({UBUNTU: "1" * 64}), f"key '{UBUNTU}': has the value '{'1' * 64}', not a digest"),
        (json.dumps({UBUNTU: None}), f"key '{UBUNTU}': has the value None, not a digest"),
        (json.dumps({UBUNTU: {"digest": D1}}), f"key '{UBUNTU}': has the value [('digest', "),
        (f'{{"{UBUNTU}": "{D1}", "{UBUNTU}": "{D2}"}}', f"key '{UBUNTU}': appears more than once (allowed: each key"),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-tag",
        "digest-in-key",
        "uppercase",
        "option",
        "whitespace",
        "non-ascii",
        "unknown-underscore-key",
        "comment-not-text",
        "uppercase-hex",
        "no-algorithm",
        "null",
        "nested-object",
        "duplicate",
    ],
)
def test_each_malformed_lock_names_the_file_the_key_and_what_is_allowed(
    tmp_path: Path, text: str, expected: str
) -> None:
    (problem,) = problems_of(tmp_path, text)
    assert problem.startswith(str(tmp_path / "bases.lock.json"))
    assert expected in problem, problem


def test_every_problem_is_reported_at_once_with_a_heading(tmp_path: Path) -> None:
    path = tmp_path / "bases.lock.json"
    path.write_text(json.dumps({"ubuntu": D1, UBUNTU: "latest", CUDA: D2}), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        BaseLock.load(path)
    assert len(caught.value.problems) == 2
    assert caught.value.report().splitlines()[0] == f"{path} is not a valid bases lock:"


def test_a_long_value_is_cut_short_in_the_message(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, json.dumps({UBUNTU: "x" * 10_000}))
    message = problem.split("bases.lock.json: ", 1)[1]  # the temporary folder's name is as long as pytest makes it
    assert len(message) < 250 and "'xxx" in problem and "xxx..., not a digest" in problem


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"ubuntu:22.04": "\xff"}', "bases.lock.json:1: is not UTF-8 (byte 0xff)"),
        (b" " * (MAX_LOCK_BYTES + 1), f"is larger than {MAX_LOCK_BYTES} bytes: not a bases lock"),
    ],
    ids=["not-utf8", "too-large"],
)
def test_unreadable_content_is_an_input_error(tmp_path: Path, content: bytes, expected: str) -> None:
    (problem,) = problems_of(tmp_path, content)
    assert expected in problem


def test_a_folder_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InputError, match="cannot read: Is a directory"):
        BaseLock.load(tmp_path / "dir.json")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(InputError, match="cannot read: not a regular file"):  # and does not wait for a writer
        BaseLock.load(tmp_path / "fifo.json")


def test_write_is_sorted_stable_ascii_and_reads_back(tmp_path: Path) -> None:
    lock = BaseLock({UBUNTU: D2, LOCAL: D1, CUDA: D1})
    first, second = tmp_path / "a.json", tmp_path / "sub" / "b.json"
    lock.write(first)
    BaseLock(dict(reversed(list(lock.digests.items())))).write(second)  # other insertion order, same lock
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text(encoding="ascii")
    assert text == (
        "{\n"
        f'  "_comment": {json.dumps(COMMENT)},\n'
        f'  "{LOCAL}": "{D1}",\n'
        f'  "{CUDA}": "{D1}",\n'
        f'  "{UBUNTU}": "{D2}"\n'
        "}\n"
    )
    assert BaseLock.load(first) == lock
    assert oct(first.stat().st_mode & 0o777) == oct(files.REGULAR)
    lock.write(first)
    assert first.read_text(encoding="ascii") == text


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bases.lock.json"
    BaseLock({UBUNTU: D1}).write(path)
    before = path.read_bytes()

    def fail(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)  # after the new content went to the temporary file
    with pytest.raises(OSError, match="No space left"):
        BaseLock({UBUNTU: D2, CUDA: D2}).write(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bases.lock.json"]


def test_a_lock_is_a_read_only_value() -> None:
    digests = {UBUNTU: D1}
    lock = BaseLock(digests)
    digests[UBUNTU] = D2  # the caller's dict is copied
    assert lock.pinned(UBUNTU) == f"{UBUNTU}@{D1}"
    with pytest.raises(TypeError):
        lock.digests[UBUNTU] = D2  # type: ignore[index]


# --- bases and what a build starts FROM --------------------------------------------------------------------------


@pytest.fixture
def make_cell(expansion: Expansion) -> Callable[..., Cell]:
    """A fixture cell with the base under test: the rule reads only base_image and bootstrap_base."""

    def _make(base_image: str, *, bootstrap: bool = False) -> Cell:
        return dataclasses.replace(expansion.cells[0], base_image=base_image, bootstrap_base=bootstrap)

    return _make


def test_pulled_bases_are_each_registry_base_once_sorted_without_those_made_here(
    make_cell: Callable[..., Cell],
) -> None:
    cells = [
        make_cell(UBUNTU),
        make_cell(CUDA),
        make_cell("dlimages/base:debian12", bootstrap=True),
        make_cell(UBUNTU),
        make_cell("ubuntu:20.04"),
        make_cell(f"ubuntu:24.04@{D1}"),  # the matrix pins it itself
    ]
    assert pulled_bases(cells) == [CUDA, "ubuntu:20.04", UBUNTU]
    assert pulled_bases([]) == []


def test_pulled_bases_of_the_fixture_matrix_skip_its_bootstrap_base(expansion: Expansion) -> None:
    bases = pulled_bases(expansion.cells)
    made_here = {cell.base_image for cell in expansion.cells if cell.bootstrap_base}
    assert made_here and not made_here & set(bases)
    assert bases == sorted(set(bases))


# --- resolving through skopeo ------------------------------------------------------------------------------------


class FakeSkopeo:
    """Plays `skopeo` for the Runner: one scripted outcome, every argv and timeout recorded."""

    def __init__(self, outcome: subprocess.CompletedProcess[str] | Exception | dict[str, Any]) -> None:
        self.outcome = outcome
        self.calls: list[list[str]] = []
        self.timeouts: list[float] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert kwargs["text"] and kwargs["capture_output"] and not kwargs["check"]
        self.calls.append(list(argv))
        self.timeouts.append(kwargs["timeout"])
        outcome = self.outcome
        if isinstance(outcome, dict):  # per ref
            outcome = outcome[argv[-1].removeprefix("docker://")]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def says(code: int, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, err)


def fatal(ref: str, msg: str) -> subprocess.CompletedProcess[str]:
    return says(1, err=FATAL.format(ref=ref, msg=msg.replace('"', '\\"')) + "\n")


def test_resolve_asks_skopeo_for_the_top_level_digest() -> None:
    skopeo = FakeSkopeo(says(0, f"{D1}\n"))
    assert resolve_digest(CUDA, Runner(skopeo)) == Resolved(CUDA, digest=D1)
    (argv,) = skopeo.calls
    assert argv == [
        "skopeo",
        "--override-os",
        "linux",
        "--override-arch",
        "amd64",
        "--command-timeout",
        "60s",
        "inspect",
        "--no-tags",
        "--format",
        "{{.Digest}}",
        "--tls-verify=true",
        f"docker://{CUDA}",
    ]
    assert skopeo.timeouts == [75]  # skopeo's own limit first; the Runner's is the backstop


@pytest.mark.parametrize(
    ("ref", "loopback"),
    [
        (LOCAL, True),
        ("localhost:5000/ubuntu:22.04", True),
        ("127.1.2.3:5000/lab/ubuntu:22.04", True),
        ("[::1]:5000/ubuntu:22.04", True),
        (UBUNTU, False),
        (CUDA, False),
        ("localhost/ubuntu:22.04", True),
        ("registry.example.com:5000/ubuntu:22.04", False),
        ("10.0.0.1:5000/ubuntu:22.04", False),
        ("127/ubuntu:22.04", False),  # a Docker Hub namespace, not a host
    ],
)
def test_tls_is_verified_except_for_registries_on_this_machine(ref: str, loopback: bool) -> None:
    assert registry_is_loopback(ref) is loopback
    assert f"--tls-verify={str(not loopback).lower()}" in skopeo_argv(ref)
    assert "--tls-verify=false" in skopeo_argv(ref, tls_verify=False)  # the caller's flag wins everywhere


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (
            subprocess.TimeoutExpired(["skopeo"], 75),
            "the registry did not answer within 60 s (skopeo was stopped)",
        ),
        (
            fatal(
                UBUNTU, 'pinging container registry r.example: Get "https://r.example/v2/": context deadline exceeded'
            ),
            'the registry did not answer within 60 s (skopeo: Error parsing image name "docker://ubuntu:22.04": '
            'pinging container registry r.example: Get "https://r.example/v2/": context deadline exceeded)',
        ),
        (
            FileNotFoundError(2, "No such file or directory", "skopeo"),
            "skopeo is not installed (cannot run skopeo: [Errno 2] No such file or directory: 'skopeo'); "
            "`bash scripts/engine.sh` installs it",
        ),
        (
            fatal(UBUNTU, "reading manifest 22.04 in r.example/library/ubuntu: manifest unknown: manifest unknown"),
            "the registry does not have this tag (deleted, or never pushed) (skopeo: Error parsing image name "
            '"docker://ubuntu:22.04": reading manifest 22.04 in r.example/library/ubuntu: manifest unknown: '
            "manifest unknown)",
        ),
        (
            fatal(
                UBUNTU, "reading manifest 22.04 in r.example/library/nosuch: requested access to the resource is denied"
            ),
            "the registry refused it: no such repository, or it needs `docker login` (skopeo: ",
        ),
        (
            fatal(
                UBUNTU,
                'pinging container registry r.example: Get "https://r.example/v2/": '
                "dial tcp: lookup r.example: no such host",
            ),
            'the registry is not reachable (skopeo: Error parsing image name "docker://ubuntu:22.04": pinging',
        ),
        (
            fatal(
                UBUNTU,
                'pinging container registry 127.0.0.1:5000: Get "http://127.0.0.1:5000/v2/": dial tcp '
                "127.0.0.1:5000: connect: connection refused",
            ),
            "the registry is not reachable (skopeo: ",
        ),
        (
            fatal(UBUNTU, "pinging container registry r.example: received unexpected HTTP status: 404 Not Found"),
            "the registry is not reachable (skopeo: ",  # a 404 on the ping: no registry there, not a missing tag
        ),
        (
            says(
                1,
                err='time="x" level=fatal msg="Error parsing manifest for image: choosing image instance: no '
                'image found in image index for architecture amd64, variant \\"\\", OS linux"\n',
            ),
            "the tag has no linux/amd64 image, the platform the matrix builds (skopeo: Error parsing manifest for "
            'image: choosing image instance: no image found in image index for architecture amd64, variant "", '
            "OS linux)",
        ),
        (
            says(2, err="Error: unknown flag: --command-timeout\n"),
            "skopeo failed: Error: unknown flag: --command-timeout",
        ),
        (says(0, "{\n"), "skopeo printed '{', not a digest"),
        (says(0, ""), "skopeo printed '', not a digest"),
    ],
    ids=[
        "hang",
        "skopeo-timeout",
        "missing-skopeo",
        "tag-not-found",
        "denied",
        "no-such-host",
        "refused",
        "ping-404",
        "no-amd64-image",
        "old-skopeo",
        "not-a-digest",
        "nothing-printed",
    ],
)
def test_resolve_reports_what_went_wrong_quoting_skopeo(outcome: Any, expected: str) -> None:
    resolved = resolve_digest(UBUNTU, Runner(FakeSkopeo(outcome)))
    assert resolved.digest is None and not resolved.ok
    assert resolved.problem is not None and resolved.problem.startswith(expected), resolved.problem
    assert "time=" not in resolved.problem and "level=fatal" not in resolved.problem
    assert str(resolved) == f"{UBUNTU}: {resolved.problem}"


@pytest.mark.parametrize("ref", ["ubuntu", f"{UBUNTU}@{D1}", "--help", "ubuntu:22.04;id"])
def test_resolve_refuses_a_ref_that_is_no_tag_before_running_anything(ref: str) -> None:
    skopeo = FakeSkopeo(says(0, D1))
    resolved = resolve_digest(ref, Runner(skopeo))
    assert resolved.problem is not None and "(allowed: " in resolved.problem
    assert skopeo.calls == []


def test_refresh_updates_what_resolved_and_keeps_the_rest() -> None:
    old = BaseLock({UBUNTU: D1, CUDA: D1, "ubuntu:18.04": D1})
    skopeo = FakeSkopeo(
        {
            UBUNTU: says(0, D2 + "\n"),  # the tag moved
            CUDA: fatal(CUDA, "reading manifest x in r.example/nvidia/cuda: manifest unknown: manifest unknown"),
            LOCAL: says(0, D2 + "\n"),  # new
            "ubuntu:20.04": subprocess.TimeoutExpired(["skopeo"], 75),  # never recorded, not resolved
        }
    )
    new, results = refresh(old, [UBUNTU, CUDA, LOCAL, "ubuntu:20.04", UBUNTU], Runner(skopeo))
    assert [r.ref for r in results] == [UBUNTU, CUDA, LOCAL, "ubuntu:20.04"]  # each once, in order
    assert [r.ok for r in results] == [True, False, True, False]
    assert dict(new.digests) == {UBUNTU: D2, CUDA: D1, LOCAL: D2, "ubuntu:18.04": D1}
    assert new.pinned("ubuntu:20.04") is None  # not faked
    assert dict(old.digests) == {UBUNTU: D1, CUDA: D1, "ubuntu:18.04": D1}  # the old lock is untouched
    assert len(skopeo.calls) == 4
    assert f"docker://{LOCAL}" in skopeo.calls[2] and "--tls-verify=false" in skopeo.calls[2]


def test_refresh_passes_the_tls_flag_on() -> None:
    skopeo = FakeSkopeo(says(0, D1))
    refresh(BaseLock(), [UBUNTU], Runner(skopeo), tls_verify=False)
    assert "--tls-verify=false" in skopeo.calls[0]
