"""disk.py without Docker: leaked layers found from a data root laid out the way Docker 26's overlay2 driver lays it
out (layerdb, BuildKit's bolt files, overlay2/l links), what may never be called leaked, and the messages.
The real engine's leak (parallel builds, moby/moby#46136) is measured in docs/measurements.md."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlimages import disk
from dlimages.runner import Runner

OLD = 1_000_000.0  # every folder's mtime in these tests
NOW = OLD + disk.MIN_AGE_S + 1


class DataRootFixture:
    """A data root under tmp_path: overlay2 folders with diff/, link and lower, and the records that name them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.overlay = root / "overlay2"
        (self.overlay / disk.LINKS).mkdir(parents=True)
        (root / "image" / "overlay2" / "layerdb" / "sha256").mkdir(parents=True)
        (root / "image" / "overlay2" / "layerdb" / "mounts").mkdir(parents=True)
        (root / "buildkit").mkdir()
        self.links: dict[str, str] = {}

    def folder(self, name: str, *, size: int = 4096, lowers: tuple[str, ...] = (), mtime: float = OLD) -> None:
        folder = self.overlay / name
        (folder / "diff").mkdir(parents=True)
        (folder / "diff" / "payload").write_bytes(b"x" * size)
        link = f"L{len(self.links):07d}"
        (folder / "link").write_text(link)
        self.links[name] = link
        (self.overlay / disk.LINKS / link).symlink_to(f"../{name}/diff")
        if lowers:
            (folder / "lower").write_text(":".join(f"l/{self.links[lower]}" for lower in lowers))
        for path in (folder / "diff" / "payload", folder / "diff", folder / "link", folder):
            if path.exists():
                os.utime(path, (mtime, mtime))
        if lowers:
            os.utime(folder / "lower", (mtime, mtime))
            os.utime(folder, (mtime, mtime))

    def image_layer(self, name: str) -> None:
        record = self.root / "image/overlay2/layerdb/sha256" / f"chain{name}"
        record.mkdir()
        (record / "cache-id").write_text(name)  # no newline, as Docker writes it

    def container(self, mount: str, init: str) -> None:
        record = self.root / "image/overlay2/layerdb/mounts" / f"c{mount}"
        record.mkdir()
        (record / "mount-id").write_text(mount)
        (record / "init-id").write_text(init)

    def buildkit_snapshot(self, name: str) -> None:
        with (self.root / "buildkit" / "snapshots.db").open("ab") as db:
            db.write(b"\x00\x01bucket\x00" + name.encode() + b"\x00")

    def names(self, leaks: list[disk.Leak]) -> list[str]:
        return sorted(leak.name for leak in leaks)


@pytest.fixture
def root(tmp_path: Path) -> DataRootFixture:
    return DataRootFixture(tmp_path / "docker")


def test_a_folder_no_record_names_is_leaked_and_the_rest_is_kept(root: DataRootFixture) -> None:
    root.folder("imagelayer0")
    root.image_layer("imagelayer0")
    root.folder("containerrw0")
    root.folder("containerrw0-init")
    root.container("containerrw0", "containerrw0-init")
    root.folder("buildkitsnap")
    root.buildkit_snapshot("buildkitsnap")
    root.folder("leakedbig000", size=3 * 4096)
    root.folder("leakedsmall0")
    leaks = disk.leaked_layers(root.root, now=NOW)
    assert root.names(leaks) == ["leakedbig000", "leakedsmall0"]
    assert leaks[0].name == "leakedbig000"  # largest first
    assert leaks[0].size >= 3 * 4096
    assert leaks[0].link == root.links["leakedbig000"]


def test_the_lower_layers_of_a_kept_folder_are_kept_too(root: DataRootFixture) -> None:
    """A BuildKit snapshot built on another snapshot names its parent only through overlay2's `lower` file."""
    root.folder("grandparent0")
    root.folder("parent000000", lowers=("grandparent0",))
    root.folder("child0000000", lowers=("parent000000", "grandparent0"))
    root.buildkit_snapshot("child0000000")
    root.folder("orphan000000", lowers=("grandparent0",))  # its lower is kept for the child, not for it
    assert root.names(disk.leaked_layers(root.root, now=NOW)) == ["orphan000000"]


def test_a_young_folder_is_never_called_leaked(root: DataRootFixture) -> None:
    """A build that just started may not have written its record yet."""
    root.folder("justmade0000", mtime=NOW - 60)
    root.folder("oldorphan000")
    assert root.names(disk.leaked_layers(root.root, now=NOW)) == ["oldorphan000"]
    assert root.names(disk.leaked_layers(root.root, now=NOW, min_age_s=0)) == ["justmade0000", "oldorphan000"]


def test_no_overlay2_folder_means_nothing_leaked(tmp_path: Path) -> None:
    assert disk.leaked_layers(tmp_path / "nothing-here", now=NOW) == []


def test_remove_leaked_deletes_the_folder_and_its_link_and_nothing_else(root: DataRootFixture) -> None:
    root.folder("imagelayer0")
    root.image_layer("imagelayer0")
    root.folder("leaked000000", size=8192)
    leaks = disk.leaked_layers(root.root, now=NOW)
    disk.remove_leaked(root.root, leaks)
    assert not (root.overlay / "leaked000000").exists()
    assert not (root.overlay / disk.LINKS / root.links["leaked000000"]).is_symlink()
    assert (root.overlay / "imagelayer0" / "diff" / "payload").exists()
    assert (root.overlay / disk.LINKS / root.links["imagelayer0"]).is_symlink()
    assert disk.leaked_layers(root.root, now=NOW) == []


@pytest.mark.parametrize("name", ["", "l", "..", "../outside"])
def test_remove_leaked_refuses_anything_but_a_layer_folder(root: DataRootFixture, name: str) -> None:
    with pytest.raises(ValueError, match="not a layer folder"):
        disk.remove_leaked(root.root, [disk.Leak(name, 0, None)])


@pytest.mark.parametrize(
    ("text", "size"),
    [("11.78GB", 11_780_000_000), ("935.6MB", 935_600_000), ("0B", 0), ("12kB", 12_000), ("n/a", 0), ("", 0)],
)
def test_docker_sizes_in_bytes(text: str, size: int) -> None:
    assert disk._size(text) == size


class FakeEngine:
    """`docker info` and `docker system df` as Docker 26 prints them with --format."""

    def __init__(self, root: Path, *, info_ok: bool = True) -> None:
        self.root, self.info_ok = root, info_ok
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[2:3] == ["prune"]:
            return subprocess.CompletedProcess(argv, 0, "Total reclaimed space: 0B\n", "")
        if argv[1] == "info":
            out = f'{json.dumps(str(self.root))} "overlay2"\n' if self.info_ok else ""
            return subprocess.CompletedProcess(argv, 0 if self.info_ok else 1, out, "")
        if argv[1:3] == ["system", "df"]:
            rows = [
                {"Type": "Images", "Size": "11.78GB", "Reclaimable": "11.78GB (100%)"},
                {"Type": "Build Cache", "Size": "935.6MB", "Reclaimable": "935.6MB"},
            ]
            return subprocess.CompletedProcess(argv, 0, "\n".join(map(json.dumps, rows)), "")
        return subprocess.CompletedProcess(argv, 1, "", f"unexpected {argv}")


def test_usage_reads_the_engine_counts_and_the_leaks(root: DataRootFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    root.folder("leaked000000")
    runner = Runner(FakeEngine(root.root))
    data_root = disk.data_root(runner)
    assert data_root == disk.DataRoot(root.root, "overlay2", local=True)
    usage = disk.usage(runner, data_root, now=NOW)
    assert (usage.images, usage.build_cache, usage.build_cache_reclaimable) == (
        11_780_000_000,
        935_600_000,
        935_600_000,
    )
    assert [leak.name for leak in usage.leaked] == ["leaked000000"]
    text = "\n".join(usage.describe())
    assert f"data root: {root.root} (overlay2)" in text
    assert "leaked layers: 0.0 GB in 1 folder(s)" in text


def test_a_remote_engine_is_counted_but_never_touched(root: DataRootFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2376")
    root.folder("leaked000000")
    runner = Runner(FakeEngine(root.root))
    data_root = disk.data_root(runner)
    assert data_root is not None and not data_root.local
    usage = disk.usage(runner, data_root, now=NOW)
    assert usage.leaked == ()
    assert "on another machine" in usage.describe()[0]
    assert disk.shortfall(data_root, 10**15, reclaimed=False) is None  # cannot be measured here: no verdict
    assert not any("leaked" in what for what, _ in disk.reclaim(runner, data_root, now=NOW).steps)
    assert (root.overlay / "leaked000000").exists()


def test_no_engine_no_data_root(tmp_path: Path) -> None:
    assert disk.data_root(Runner(FakeEngine(tmp_path, info_ok=False))) is None


def test_shortfall_says_how_much_and_what_to_do(root: DataRootFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    data_root = disk.DataRoot(root.root, "overlay2", local=True)
    assert disk.shortfall(data_root, 0, reclaimed=False) is None
    assert disk.shortfall(data_root, 1, reclaimed=False) is None
    before = disk.shortfall(data_root, 10**15, reclaimed=False)
    assert before is not None
    assert f"on the Docker data root {root.root}, 1000000.0 GB needed" in before
    assert "`invoke disk --reclaim`" in before
    after = disk.shortfall(data_root, 10**15, reclaimed=True)
    assert after is not None and "docker image rm" in after and "--reclaim`" not in after


def _prunes(engine: FakeEngine) -> list[str]:
    return [" ".join(argv[1:3]) for argv in engine.calls if argv[2:3] == ["prune"]]


def test_reclaim_with_enough_free_removes_only_the_leaked_layers(
    root: DataRootFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What nothing uses goes first; the build cache (whose loss makes the next builds cold) stays when not needed."""
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    root.folder("leaked000000")
    engine = FakeEngine(root.root)
    done = disk.reclaim(Runner(engine), disk.DataRoot(root.root, "overlay2", local=True), need=1, now=NOW)
    assert [what for what, _ in done.steps] == ["leaked layers (1 folders)"]
    assert [what.split(":")[0] for what in done.kept] == ["dangling images", "build cache"]
    assert _prunes(engine) == []
    assert not (root.overlay / "leaked000000").exists()


@pytest.mark.parametrize("need", [0, 10**15])
def test_reclaim_short_of_space_goes_on_to_dangling_images_then_the_cache(
    root: DataRootFixture, monkeypatch: pytest.MonkeyPatch, need: int
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    engine = FakeEngine(root.root)
    done = disk.reclaim(Runner(engine), disk.DataRoot(root.root, "overlay2", local=True), need=need, now=NOW)
    assert _prunes(engine) == ["image prune", "builder prune"]
    assert [what for what, _ in done.steps] == [
        "leaked layers (0 folders)",
        "dangling images",
        "build cache",
        "layers only the build cache held (0 folders)",
    ]
    assert done.kept == () and done.failures == ()


# --- BuildKit's bolt files -----------------------------------------------------------------------------------------

PAGE = 4096


def leaf(page_id: int, pairs: list[tuple[int, bytes, bytes]]) -> bytes:
    """A bbolt leaf page: header, one 16-byte element per pair (pos counted from the element), then keys and values."""
    elements, blob = b"", b""
    for index, (flags, key, value) in enumerate(pairs):
        position = 16 + len(pairs) * 16 + len(blob) - (16 + index * 16)
        elements += struct.pack("<IIII", flags, position, len(key), len(value))
        blob += key + value
    return struct.pack("<QHHI", page_id, 0x02, len(pairs), 0) + elements + blob


def inline_bucket(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return struct.pack("<QQ", 0, 0) + leaf(0, [(0, key, value) for key, value in pairs])


def bolt_file() -> bytes:
    """Two metas (the newer, txid 2, points at root page 3; the older at page 5, a stale root), a freelist page, the
    live root with an inline bucket and a bucket on page 4, and a name that survives only in stale page 5."""

    def meta(page_id: int, root: int, txid: int) -> bytes:
        body = struct.pack("<IIIIQQQQQQ", 0xED0CDAED, 2, PAGE, 0, root, 0, 2, 6, txid, 0)
        return struct.pack("<QHHI", page_id, 0x04, 0, 0) + body

    pages = [
        meta(0, 5, 1),
        meta(1, 3, 2),
        struct.pack("<QHHI", 2, 0x10, 0, 0),
        leaf(
            3,
            [
                (1, b"activesnap00", inline_bucket([(b"chainid", b"sha256:" + b"a" * 64)])),
                (1, b"meta", struct.pack("<QQ", 4, 0)),
            ],
        ),
        leaf(4, [(0, b"record", b'{"snapshot":"insidevalue0","size":1}')]),
        leaf(5, [(0, b"stalefolder0", b"")]),
    ]
    return b"".join(page.ljust(PAGE, b"\0") for page in pages)


def test_bolt_words_reads_the_live_tree_of_the_newest_meta_only() -> None:
    words = disk.bolt_words(bolt_file())
    assert words is not None
    assert {b"activesnap00", b"chainid", b"sha256:" + b"a" * 64, b"meta", b"record"} <= words
    assert b'{"snapshot":"insidevalue0","size":1}' in words
    assert b"stalefolder0" not in words


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"\0" * len(data),  # not a bolt file
        lambda data: data[: PAGE * 4],  # the root's bucket points past the end
        lambda data: data[: PAGE * 3] + b"\xff" * PAGE + data[PAGE * 4 :],  # a torn root page
    ],
)
def test_a_file_this_reader_does_not_understand_gives_none(damage: Any) -> None:
    assert disk.bolt_words(damage(bolt_file())) is None


def test_a_name_only_a_free_page_keeps_is_leaked_one_in_a_live_value_is_kept(root: DataRootFixture) -> None:
    for name in ("activesnap00", "insidevalue0", "stalefolder0"):
        root.folder(name)
    (root.root / "buildkit" / "snapshots.db").write_bytes(bolt_file())
    assert root.names(disk.leaked_layers(root.root, now=NOW)) == ["stalefolder0"]
    # A file that does not parse is searched as raw bytes, free pages and all: nothing is called leaked then.
    torn = bytearray(bolt_file())
    torn[PAGE * 4 + 8 : PAGE * 4 + 10] = b"\0\0"  # page 4 is neither a branch nor a leaf any more
    assert disk.bolt_words(bytes(torn)) is None
    (root.root / "buildkit" / "snapshots.db").write_bytes(bytes(torn))
    assert disk.leaked_layers(root.root, now=NOW) == []
