"""layerdiff without Docker: synthetic images (layer tars, config, `docker save` archives) built in memory, in
the OCI layout of Docker 25+, the `<id>/layer.tar` layout of Docker 20.10 and with compressed blobs; `docker
image inspect` answered by a fake run, `docker save` by a SaveFn over the bytes (or a fake `docker` script)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

import dlimages.repro.layerdiff as layerdiff
from dlimages.core.runner import Runner
from dlimages.repro.comparison import FileDifference, FileState, ImageComparison
from dlimages.repro.layerdiff import CompareError, compare_images

T0 = 1_796_043_731  # 2026-11-30T13:02:11Z
T1 = T0 + 29  # 2026-11-30T13:02:40Z
FROM_STEP = "/bin/sh -c #(nop) ADD file:4b03b5f551e3fbdf47ec609712007327828f7530cc3455c43bbcdcaf449a75a9 in / "
COPY_STEP = "COPY app /app # buildkit"
RUN_STEP = "RUN /bin/sh -c date > /etc/built-at # buildkit"

# --- synthetic layers and images ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One tar entry to write; defaults are a root-owned 0644 file stamped T0."""

    name: str
    data: bytes = b""
    kind: bytes = tarfile.REGTYPE
    mode: int | None = None
    uid: int = 0
    gid: int = 0
    mtime: int = T0
    link: str = ""
    pax: dict[str, str] = field(default_factory=dict)


def d(name: str, **kw: Any) -> Entry:
    return Entry(name, kind=tarfile.DIRTYPE, **kw)


def layer(*entries: Entry) -> bytes:
    """A layer tar as Docker writes one (PAX format)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type = entry.kind
            info.mode = entry.mode if entry.mode is not None else (0o755 if entry.kind == tarfile.DIRTYPE else 0o644)
            info.uid, info.gid, info.mtime, info.linkname = entry.uid, entry.gid, entry.mtime, entry.link
            info.pax_headers = entry.pax
            info.size = len(entry.data) if entry.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(entry.data) if info.size else None)
    return out.getvalue()


BASE = layer(d("etc"), Entry("etc/os-release", b"ID=debian\n"), d("bin"), Entry("bin/sh", b"\x7fELF" * 100, mode=0o755))
APP = layer(d("app"), Entry("app/main.py", b"print('hi')\n"))


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Image:
    layers: tuple[bytes, ...]
    config: bytes

    @property
    def id(self) -> str:
        return sha(self.config)

    @property
    def diff_ids(self) -> list[str]:
        return [sha(blob) for blob in self.layers]


def image(
    *layers: bytes,
    created: str = "2026-11-30T13:02:11Z",
    steps: tuple[str, ...] = (FROM_STEP, COPY_STEP, RUN_STEP),
    labels: dict[str, str] | None = None,
) -> Image:
    """An image config as BuildKit writes one: empty-layer history entries (ENV, LABEL) between the layers'."""
    history: list[dict[str, Any]] = []
    for i, blob in enumerate(layers):
        del blob
        history.append({"created": created, "created_by": steps[i] if i < len(steps) else f"RUN step {i}"})
        history.append({"created": created, "created_by": f"ENV STEP={i}", "empty_layer": True})
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Labels": labels or {}},
        "rootfs": {"type": "layers", "diff_ids": [sha(blob) for blob in layers]},
        "history": history,
    }
    return Image(tuple(layers), json.dumps(config).encode())


def built_at(content: bytes, **kw: Any) -> bytes:
    """The layer of RUN_STEP: a file whose content (or metadata) is what varies between builds."""
    return layer(d("etc"), Entry("etc/built-at", content, **kw))


# --- `docker save` archives ---------------------------------------------------------------------------------------


Member = tuple[str, bytes | None]  # name, content (None: a directory)


def tar_of(members: list[Member]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def oci_members(img: Image, *, compress: bool = False) -> list[Member]:
    """Docker 25+: every blob under blobs/sha256/ (layers uncompressed, so named by their diff_id), index.json,
    and a manifest.json naming the blobs; compress=True writes gzip layers (as the containerd store keeps them)."""
    layers = [gzip.compress(blob, mtime=0) if compress else blob for blob in img.layers]
    manifest = json.dumps({"config": {"digest": img.id}, "layers": [{"digest": sha(b)} for b in layers]}).encode()
    blobs = {sha(b): b for b in [*layers, img.config, manifest]}
    paths = [f"blobs/sha256/{sha(blob)[7:]}" for blob in layers]
    top = [{"Config": f"blobs/sha256/{img.id[7:]}", "RepoTags": ["x:y"], "Layers": paths}]
    members: list[Member] = [("blobs", None), ("blobs/sha256", None)]
    members += [(f"blobs/sha256/{digest[7:]}", blob) for digest, blob in sorted(blobs.items())]
    members += [
        ("index.json", json.dumps({"manifests": [{"digest": sha(manifest)}]}).encode()),
        ("manifest.json", json.dumps(top).encode()),
        ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
        ("repositories", b'{"x": {"y": "0"}}'),
    ]
    return members


def legacy_members(img: Image) -> list[Member]:
    """Docker 20.10: <v1 id>/layer.tar per layer (the v1 ID says nothing of the diff_id), then <image id>.json,
    then manifest.json last."""
    members: list[Member] = []
    paths = []
    for i, blob in enumerate(img.layers):
        v1 = hashlib.sha256(f"v1 {i} {img.id}".encode()).hexdigest()
        members += [(v1, None), (f"{v1}/VERSION", b"1.0"), (f"{v1}/json", b'{"id": "%s"}' % v1.encode())]
        members.append((f"{v1}/layer.tar", blob))
        paths.append(f"{v1}/layer.tar")
    members.append((f"{img.id[7:]}.json", img.config))
    members.append(("manifest.json", json.dumps([{"Config": f"{img.id[7:]}.json", "Layers": paths}]).encode()))
    members.append(("repositories", b'{"x": {"y": "0"}}'))
    return members


def shuffled(members: list[Member]) -> list[Member]:
    """The same members, directories first, the rest in an arbitrary (fixed) order: no order is promised."""
    dirs = [m for m in members if m[1] is None]
    rest = [m for m in members if m[1] is not None]
    random.Random(7).shuffle(rest)  # noqa: S311 - an arbitrary order, not a secret
    return dirs + rest


LAYOUTS: dict[str, Callable[[Image], bytes]] = {
    "oci": lambda img: tar_of(oci_members(img)),
    "oci-shuffled": lambda img: tar_of(shuffled(oci_members(img))),
    "oci-gzip-blobs": lambda img: tar_of(oci_members(img, compress=True)),
    "docker-20.10": lambda img: tar_of(legacy_members(img)),
    "docker-20.10-shuffled": lambda img: tar_of(shuffled(legacy_members(img))),
}


class Engine:
    """The two Docker calls layerdiff makes: `docker image inspect REF` (a fake run for the Runner) and
    `docker save REF` (a SaveFn), over images kept in memory; it records what was saved."""

    def __init__(self, images: dict[str, Image], layout: str = "oci") -> None:
        self.images = images
        self.archives = {ref: LAYOUTS[layout](img) for ref, img in images.items()}
        self.saved: list[str] = []

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert argv[:3] == ["docker", "image", "inspect"], argv
        img = self.images.get(argv[3])
        if img is None:
            missing = f"Error response from daemon: No such image: {argv[3]}\n"
            return subprocess.CompletedProcess(argv, 1, "[]\n", missing)
        info = {"Id": img.id, "Created": "2026-11-30T13:02:11Z", "RootFS": {"Type": "layers", "Layers": img.diff_ids}}
        return subprocess.CompletedProcess(argv, 0, json.dumps([info]), "")

    @contextlib.contextmanager
    def save(self, ref: str) -> Iterator[IO[bytes]]:
        self.saved.append(ref)
        yield io.BytesIO(self.archives[ref])

    def compare(self, first: str = "a", second: str = "b") -> ImageComparison:
        return compare_images(first, second, save=self.save, runner=Runner(run=self.run))


def compare(first: Image, second: Image, layout: str = "oci") -> ImageComparison:
    return Engine({"a": first, "b": second}, layout).compare()


def only_file(result: ImageComparison) -> FileDifference:
    assert len(result.layers) == 1, result.format()
    assert len(result.layers[0].files) == 1, result.format()
    return result.layers[0].files[0]


# --- what differs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_content_difference_names_the_layer_its_step_and_the_file(layout: str) -> None:
    first = image(BASE, APP, built_at(b"2026-11-30T13:02:11Z\n"))
    second = image(BASE, APP, built_at(b"2026-11-30T13:02:40Z\n"))
    result = compare(first, second, layout)

    assert not result.identical
    assert (result.first, result.second) == (first.id, second.id)
    assert result.config == ()
    [changed] = result.layers
    assert (changed.index, changed.step) == (2, "RUN /bin/sh -c date > /etc/built-at")
    assert (changed.first, changed.second) == (first.diff_ids[2], second.diff_ids[2])
    [file] = changed.files
    assert (file.path, file.what) == ("/etc/built-at", ("content",))
    a_sha = hashlib.sha256(b"2026-11-30T13:02:11Z\n").hexdigest()
    b_sha = hashlib.sha256(b"2026-11-30T13:02:40Z\n").hexdigest()
    assert file.first is not None and file.first.sha256 == a_sha and file.first.kind == "file"
    assert file.describe() == f"/etc/built-at: content (sha256 {a_sha[:8]}..≠{b_sha[:8]}..)"
    report = result.format()
    assert f"first:  {first.id}" in report and f"second: {second.id}" in report
    assert "layer 2: RUN /bin/sh -c date > /etc/built-at\n" in report
    assert file.describe() in report


def test_only_in_one_image_and_whiteouts_are_named_with_their_paths() -> None:
    first = image(BASE, APP, layer(d("etc"), Entry("etc/old.conf", b"x=1\n")))
    second = image(BASE, APP, layer(d("etc"), Entry("etc/.wh.old.conf"), Entry("etc/new.conf", b"x=2\n")))
    files = {f.path: f for f in only_layer(compare(first, second)).files}

    assert {path: f.what for path, f in files.items()} == {
        "/etc/.wh.old.conf": ("only in second",),
        "/etc/new.conf": ("only in second",),
        "/etc/old.conf": ("only in first",),
    }
    assert list(files) == sorted(files)
    assert files["/etc/old.conf"].describe() == "/etc/old.conf: only in first (file, 4 bytes)"
    assert files["/etc/old.conf"].second is None


def only_layer(result: ImageComparison) -> Any:
    assert len(result.layers) == 1, result.format()
    return result.layers[0]


@pytest.mark.parametrize(
    ("change", "what", "detail"),
    [
        ({"mode": 0o600}, ("mode",), "mode (0644 ≠ 0600)"),
        ({"uid": 1000, "gid": 1000}, ("owner",), "owner (0:0 ≠ 1000:1000)"),
        ({"mtime": T1}, ("time",), "time (2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z)"),
        ({"pax": {"mtime": f"{T0}.25"}}, ("time",), "time (2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:11.25Z)"),
        (
            {"pax": {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}},
            ("xattrs",),
            "xattrs (security.capability)",
        ),
        ({"mode": 0o755, "mtime": T1}, ("mode", "time"), "mode (0644 ≠ 0755), time ("),
    ],
)
def test_each_metadata_difference_is_named(change: dict[str, Any], what: tuple[str, ...], detail: str) -> None:
    first = image(BASE, APP, built_at(b"same\n"))
    second = image(BASE, APP, built_at(b"same\n", **change))
    file = only_file(compare(first, second))

    assert (file.path, file.what) == ("/etc/built-at", what)
    assert file.describe().startswith(f"/etc/built-at: {detail}")


def test_content_and_size_both_named_when_the_size_changes() -> None:
    file = only_file(compare(image(BASE, APP, built_at(b"short\n")), image(BASE, APP, built_at(b"longer text\n"))))
    assert file.what == ("content", "size")
    assert file.describe().endswith(", size (6 ≠ 12)")


def test_type_and_link_target_differences() -> None:
    first = image(
        layer(
            d("usr"),
            Entry("usr/python", kind=tarfile.SYMTYPE, link="python3.11"),
            Entry("usr/lib", kind=tarfile.SYMTYPE, link="lib64"),
            Entry("usr/tool", b"#!/bin/sh\n"),
            Entry("usr/tool-alias", kind=tarfile.LNKTYPE, link="usr/tool"),
        )
    )
    second = image(
        layer(
            d("usr"),
            Entry("usr/python", kind=tarfile.SYMTYPE, link="python3.12"),
            d("usr/lib"),
            Entry("usr/tool", b"#!/bin/sh\n"),
            Entry("usr/tool-alias", kind=tarfile.LNKTYPE, link="usr/python"),
        )
    )
    files = {f.path: f for f in only_layer(compare(first, second)).files}

    assert {path: f.what for path, f in files.items()} == {
        "/usr/lib": ("type", "mode"),
        "/usr/python": ("link",),
        "/usr/tool-alias": ("link",),
    }
    assert files["/usr/python"].describe() == "/usr/python: link (python3.11 ≠ python3.12)"
    assert files["/usr/tool-alias"].describe() == "/usr/tool-alias: link (/usr/tool ≠ /usr/python)"
    assert files["/usr/lib"].describe().startswith("/usr/lib: type (symlink ≠ dir)")
    second_lib = files["/usr/lib"].second
    assert second_lib == FileState(kind="dir", mode=0o755, uid=0, gid=0, mtime=T0, size=0)


def test_a_layer_only_one_image_has_lists_all_its_files() -> None:
    first = image(BASE, APP)
    second = image(BASE, APP, built_at(b"x\n"))
    [extra] = compare(first, second).layers

    assert (extra.index, extra.first, extra.second) == (2, None, second.diff_ids[2])
    assert [(f.path, f.what) for f in extra.files] == [
        ("/etc", ("only in second",)),
        ("/etc/built-at", ("only in second",)),
    ]
    assert "  first:  (no such layer)" in compare(first, second).format()


def test_an_empty_layer_against_one_with_a_file() -> None:
    empty = layer()
    assert not empty.strip(b"\0")  # an empty tar is nothing but zeros
    file = only_file(compare(image(BASE, empty), image(BASE, layer(Entry("marker", b"1")))))
    assert (file.path, file.what) == ("/marker", ("only in second",))


def test_same_files_in_another_order_are_reported_as_such() -> None:
    entries = (d("etc"), Entry("etc/a", b"a"), Entry("etc/b", b"b"))
    first = image(BASE, layer(*entries))
    second = image(BASE, layer(entries[0], entries[2], entries[1]))
    changed = only_layer(compare(first, second))

    assert changed.files == ()
    assert changed.note == "same files, in a different order in the layer tar"
    assert changed.note in compare(first, second).format()


def test_config_differences_are_named_by_their_path() -> None:
    first = image(BASE, APP, created="2026-11-30T13:02:11Z", labels={"org.example.build": "1", "team": "ml"})
    second = image(BASE, APP, created="2026-11-30T13:02:40Z", labels={"org.example.build": "2"})
    result = compare(first, second)

    assert result.layers == ()
    assert result.config == (  # keys sorted, lists by index
        'config.Labels["org.example.build"]: 1 ≠ 2',
        'config.Labels["team"]: ml ≠ (absent)',
        "created: 2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z",
        "history[0].created: 2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z",
        "history[1].created: 2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z",
        "history[2].created: 2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z",
        "history[3].created: 2026-11-30T13:02:11Z ≠ 2026-11-30T13:02:40Z",
    )
    assert 'config: 7 differences\n  config.Labels["org.example.build"]: 1 ≠ 2\n' in result.format()


def test_steps_skip_empty_layer_history_entries_and_are_shortened() -> None:
    long_run = "RUN /bin/sh -c " + "pip install --no-cache-dir  torch==2.1.2 \\\n   numpy " * 5 + "# buildkit"
    steps = (FROM_STEP, COPY_STEP, long_run)
    first = image(built_at(b"0"), APP, built_at(b"1"), steps=steps)
    second = image(built_at(b"9"), APP, built_at(b"2"), steps=steps)
    layers = compare(first, second).layers

    assert [layer.index for layer in layers] == [0, 2]
    assert layers[0].step == "ADD file:4b03b5f551e3fbdf47ec609712007327828f7530cc3455c43bbcdcaf449a75a9 in /"
    assert layers[1].step.startswith("RUN /bin/sh -c pip install --no-cache-dir torch==2.1.2 \\ numpy pip")
    assert len(layers[1].step) == 100 and layers[1].step.endswith("...")


def test_format_truncates_long_file_lists() -> None:
    names = [f"etc/f{i}" for i in range(5)]
    first = image(BASE, layer(*(Entry(n, b"1") for n in names)))
    second = image(BASE, layer(*(Entry(n, b"2") for n in names)))
    report = compare(first, second).format(max_files_per_layer=2)

    assert "/etc/f0: content" in report and "/etc/f1: content" in report
    assert "/etc/f2" not in report
    assert report.endswith("  ... and 3 more")


# --- what is read ------------------------------------------------------------------------------------------------


def test_identical_images_are_identical_and_nothing_is_saved() -> None:
    img = image(BASE, APP, built_at(b"x"))
    engine = Engine({"a": img, "a-again": img})

    def refuse(ref: str) -> Any:
        raise AssertionError(f"docker save {ref} for identical images")

    result = compare_images("a", "a-again", save=refuse, runner=Runner(run=engine.run))
    assert result.identical
    assert (result.config, result.layers) == ((), ())
    assert result.format() == f"first:  {img.id}\nsecond: {img.id}\nidentical"


def test_unchanged_layers_are_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the OCI layout an unchanged layer is known by its blob name: skipped, even when it is not a tar at all."""
    first = image(BASE, APP, built_at(b"1"))
    second = image(BASE, APP, built_at(b"2"))
    engine = Engine({"a": first, "b": second})
    for ref in engine.archives:
        # Replace the unchanged layers' contents with garbage of the same length, names kept.
        for blob in (BASE, APP):
            engine.archives[ref] = engine.archives[ref].replace(blob, b"\xff" * len(blob))
    parsed: list[int] = []
    real = layerdiff._layer_entries

    def spy(reader: Any) -> Any:
        parsed.append(1)
        return real(reader)

    monkeypatch.setattr(layerdiff, "_layer_entries", spy)
    result = engine.compare()

    assert engine.saved == ["a", "b"]
    assert len(parsed) == 2  # layer 2 of each image
    assert [(f.path, f.what) for f in only_layer(result).files] == [("/etc/built-at", ("content",))]


class Tripwire(io.RawIOBase):
    """A stream served 512 bytes a read that fails the test when read past `limit`."""

    def __init__(self, data: bytes, limit: int) -> None:
        super().__init__()
        self.data, self.limit, self.pos = data, limit, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        size = 512 if size < 0 else min(size, 512)
        chunk = self.data[self.pos : self.pos + size]
        self.pos += len(chunk)
        assert self.pos <= self.limit, f"read to {self.pos}, past {self.limit}: reading went on after all was found"
        return chunk

    def readinto(self, buffer: Any, /) -> int:
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_reading_stops_once_the_config_and_the_changed_layers_are_read() -> None:
    """Docker 20.10 writes manifest.json last; it is not needed, and neither is anything after the config."""
    first = image(BASE, APP, built_at(b"1"))
    second = image(BASE, APP, built_at(b"2"))
    engine = Engine({"a": first, "b": second}, "docker-20.10")

    @contextlib.contextmanager
    def save(ref: str) -> Iterator[IO[bytes]]:
        data = engine.archives[ref]
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            limit = tar.getmember("manifest.json").offset
        yield Tripwire(data, limit)  # type: ignore[misc]  # a raw stream: no read-ahead of its own

    result = compare_images("a", "b", save=save, runner=Runner(run=engine.run))
    assert [(f.path, f.what) for f in only_layer(result).files] == [("/etc/built-at", ("content",))]


# --- errors ------------------------------------------------------------------------------------------------------


def test_a_missing_image_names_the_ref_and_dockers_words() -> None:
    engine = Engine({"a": image(BASE)})
    with pytest.raises(CompareError) as caught:
        compare_images("a", "repro:nope", save=engine.save, runner=Runner(run=engine.run))
    assert str(caught.value) == (
        "cannot compare repro:nope: docker image inspect failed: Error response from daemon: No such image: repro:nope"
    )
    assert engine.saved == []


def test_an_archive_without_the_changed_layer_is_an_error() -> None:
    first, second = image(BASE, built_at(b"1")), image(BASE, built_at(b"2"))
    engine = Engine({"a": first, "b": second})
    engine.archives["b"] = LAYOUTS["oci"](image(BASE))
    with pytest.raises(CompareError, match=rf"docker save of b holds no layer {second.diff_ids[1]}"):
        engine.compare()


def test_a_blob_that_is_not_the_layer_its_name_says_is_an_error() -> None:
    first, second = image(BASE, built_at(b"1")), image(BASE, built_at(b"2"))
    engine = Engine({"a": first, "b": second})
    engine.archives["b"] = engine.archives["b"].replace(second.layers[1], bytes(len(second.layers[1])))
    with pytest.raises(CompareError, match=r"blobs/sha256/[0-9a-f]{64} does not hold the layer its name says"):
        engine.compare()


FAKE_DOCKER = """#!/bin/sh
# `docker save REF` only: the archive the test left for REF, or docker's words for a missing image.
[ "$1" = save ] || exit 2
archive="$FAKE_ARCHIVES/$2.tar"
if [ ! -f "$archive" ]; then
    echo "Error response from daemon: reference does not exist" >&2
    exit 1
fi
exec cat "$archive"
"""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `docker` first on PATH that plays `docker save` from files: the real docker_save runs against it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(FAKE_DOCKER, encoding="utf-8")
    script.chmod(0o755)
    archives = tmp_path / "archives"
    archives.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ARCHIVES", str(archives))
    return archives


def test_docker_save_streams_and_stops_docker_once_done(fake_docker: Path) -> None:
    first, second = image(BASE, APP, built_at(b"1")), image(BASE, APP, built_at(b"2"))
    engine = Engine({"a": first, "b": second}, "docker-20.10")
    for ref, img in engine.images.items():
        # 1 MiB after everything needed: more than a pipe holds, so docker is still writing when it is stopped.
        (fake_docker / f"{ref}.tar").write_bytes(tar_of([*legacy_members(img), ("padding", bytes(1 << 20))]))
    result = compare_images("a", "b", runner=Runner(run=engine.run))
    assert [(f.path, f.what) for f in only_layer(result).files] == [("/etc/built-at", ("content",))]


def test_docker_save_failing_names_the_ref_and_dockers_last_line(fake_docker: Path) -> None:
    engine = Engine({"a": image(BASE, built_at(b"1")), "b": image(BASE, built_at(b"2"))})
    (fake_docker / "a.tar").write_bytes(engine.archives["a"])
    with pytest.raises(CompareError) as caught:
        compare_images("a", "b", runner=Runner(run=engine.run))
    assert str(caught.value) == "docker save b failed (exit 1): Error response from daemon: reference does not exist"
