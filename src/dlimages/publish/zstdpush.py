"""`invoke push --compression zstd`: layers compressed with zstd at a fixed level instead of `docker push`'s gzip;
and every push from the containerd store, gzip too.

The engine's own push knows only gzip, and BuildKit's exporter on the `docker` driver ignores `compression=zstd`
(measured: the registry got gzip layers). So the image is streamed out of the engine once (`docker save`, read as
it comes, never written to disk whole) and each layer is compressed as it passes, on every core, into an OCI layout
in the repository's .work/ that holds only the compressed layers; skopeo copies that layout to each registry as it
is (`--preserve-digests`). The uncompressed bytes of every layer are hashed on the way and must be the layer's
digest. The image's config is kept byte for byte, so the registry's image has the local image ID.

The stream comes from the engine's API socket where it can, read by a small tar reader (core.imagestream: both
measured faster than the CLI's pipe and tarfile).

The same image gives the same bytes, so the same manifest digest, push after push and host after host: the level is
fixed, the zstd library is the pinned `zstandard` wheel's, and zstd's multi-threaded output does not depend on the
number of threads (unit-tested). The OCI layout in `docker save`'s output needs Docker 25 or later.

On the containerd image store (the default of Docker 29+) `docker save` writes the layers as the store holds them:
uncompressed as `invoke build` stores them (core.imagestore.EXPORT), gzip-compressed when pulled or built otherwise.
A gzip layer is decompressed as it passes (recognised by gzip's magic bytes, as the blobs come before the manifest
that names their media type), and the decompressed bytes must be the config's diff_id for that layer. As `docker
push` sends the layers as stored there, every push from that store goes this way, gzip ones too (pgzip.py, at
GZIP_LEVEL).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import zstandard

from dlimages.core.imagestream import ArchiveError, Saver, TarStream, docker_save
from dlimages.core.references import registry_of, split_tag
from dlimages.core.runner import Result, Runner
from dlimages.core.watch import Wait
from dlimages.publish.pgzip import ParallelGzip

COMPRESSIONS = ("gzip", "zstd")
OLD_SAVE = "--compression zstd needs Docker 25.0 or later to push from: its `docker save` writes an OCI layout"
ZSTD_LEVEL = 3  # fixed: another level gives other bytes, so another digest
GZIP_LEVEL = 6  # what `docker push` uses (Go's default)
LEVELS = {"zstd": ZSTD_LEVEL, "gzip": GZIP_LEVEL}
SMALL = 1 << 22  # blobs up to this size are also kept as they are: the index, manifests and configs are among them
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar")
GZIP_LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip")
_GZIP_MAGIC = b"\x1f\x8b"


class _Stream(Protocol):
    """A compressor as zlib's and zstandard's compress objects are."""

    def compress(self, data: bytes | memoryview, /) -> bytes: ...

    def flush(self) -> bytes: ...


class LayoutError(ArchiveError):
    """`docker save`'s output is not what an OCI layout of one image should be."""


class Archives:
    """The OCI layout of each local image, its layers compressed with `compression`, made once and shared by every
    registry it goes to; deleted with the folder on `close`."""

    def __init__(self, folder: Path, save: Saver = docker_save, compression: str = "zstd") -> None:
        self.compression, self.level = compression, LEVELS[compression]
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder  # the push's scratch folder (publish.scratch), or one of its own
        self.made: dict[str, Path] = {}
        self.configs: dict[str, str] = {}  # local image ID -> the config digest its layout kept
        self.save = save

    def archive(self, ref: str, local_id: str) -> Path | Result:
        """The layout of `ref` (written now, or before for this image); the failed `docker save` otherwise."""
        if local_id not in self.made:
            layout = self.folder / local_id.removeprefix("sha256:")[:16]
            stream, finish = self.save(ref)
            error = ""
            try:
                self.configs[local_id] = write_layout(stream, layout, self.compression)["config"]["digest"]
            except (ArchiveError, OSError, ValueError) as problem:
                error = str(problem)
            finally:
                stream.close()
            saved = finish()
            if not saved.ok or error:
                shutil.rmtree(layout, ignore_errors=True)
                err = saved.err if not saved.ok else error
                return Result(saved.argv, saved.code or 1, saved.out, err)
            self.made[local_id] = layout
        return self.made[local_id]

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def write_layout(stream: IO[bytes], layout: Path, compression: str = "zstd") -> dict[str, Any]:
    """Read `docker save`'s tar from `stream` and write `layout`: an OCI layout of its one image with every layer
    compressed by zstd (ZSTD_LEVEL) or gzip (GZIP_LEVEL, pgzip.py), the config as it was. Returns the new manifest.
    Raises LayoutError when a layer's bytes are not its digest or the tar is not an OCI layout of one image (its
    base, ArchiveError, when it is not a whole tar)."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    threads = max(1, os.cpu_count() or 1)
    if compression == "zstd":
        compressor: Callable[[], _Stream] = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=threads).compressobj
    else:
        compressor = lambda: ParallelGzip(GZIP_LEVEL, threads)  # noqa: E731
    media_type = ZSTD_LAYER if compression == "zstd" else GZIP_LAYER
    small: dict[str, bytes] = {}  # digest -> bytes, for the blobs up to SMALL and index.json
    compressed: dict[str, tuple[str, int, str]] = {}  # saved blob's digest -> (zstd digest, size, diff_id)
    archive = TarStream(stream)
    for name, size, is_file in archive.members():
        if not is_file:
            continue
        if name == "index.json":
            small["index.json"] = archive.read()
        elif name.startswith("blobs/sha256/"):
            digest = "sha256:" + name.removeprefix("blobs/sha256/")
            compressed[digest] = _compress(archive.data(), digest, blobs, compressor, small, size)
    if "index.json" not in small:
        raise LayoutError(f"docker save wrote no index.json: {OLD_SAVE}")
    index = json.loads(small["index.json"])
    if len(index.get("manifests", [])) != 1:
        raise LayoutError(f"docker save's index.json lists {len(index.get('manifests', []))} images, not one")
    manifest = json.loads(_blob(small, index["manifests"][0]["digest"]))
    config = manifest["config"]["digest"]
    diff_ids = json.loads(_blob(small, config)).get("rootfs", {}).get("diff_ids", [])
    layers = []
    for number, layer in enumerate(manifest["layers"]):
        if layer["mediaType"] not in (*LAYER_TYPES, *GZIP_LAYER_TYPES):
            raise LayoutError(f"layer {layer['digest']} is {layer['mediaType']}, not a tar (or a gzip of one)")
        if layer["digest"] not in compressed:
            raise LayoutError(f"docker save's output lacks layer {layer['digest']}")
        digest, size, diff_id = compressed[layer["digest"]]
        if number >= len(diff_ids) or diff_ids[number] != diff_id:
            raise LayoutError(f"layer {layer['digest']} holds {diff_id}, which is not the config's layer {number}")
        layers.append({**layer, "mediaType": media_type, "digest": digest, "size": size})
    kept = {layer["digest"] for layer in layers}
    for zdigest, _, _ in compressed.values():  # the index, manifests and config go as docker saved them
        if zdigest not in kept:
            (blobs / zdigest.removeprefix("sha256:")).unlink(missing_ok=True)
    (blobs / config.removeprefix("sha256:")).write_bytes(_blob(small, config))
    new = {**manifest, "mediaType": OCI_MANIFEST, "layers": layers}
    raw = json.dumps(new, separators=(",", ":"), sort_keys=True).encode()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    (blobs / digest.removeprefix("sha256:")).write_bytes(raw)
    descriptor = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(raw)}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [descriptor]}), encoding="utf-8")
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}', encoding="utf-8")
    return new


def _blob(small: dict[str, bytes], digest: str) -> bytes:
    if digest not in small:
        raise LayoutError(f"docker save's output lacks {digest} (or it is over {SMALL} bytes)")
    return small[digest]


def _compress(
    source: Iterator[memoryview],
    digest: str,
    blobs: Path,
    compressor: Callable[[], _Stream],
    small: dict[str, bytes],
    size: int,
) -> tuple[str, int, str]:
    """One blob through the compressor into `blobs`, hashed as saved, as a tar and as compressed: (compressed digest,
    size, the tar's digest). A gzip blob (a layer the containerd store keeps compressed) is decompressed first; every
    blob is kept as it is in `small` too if it is small."""
    saved, plain, packed = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    kept = bytearray() if size <= SMALL else None
    stream = compressor()
    gunzip: Any = None  # zlib's decompressor, once the blob's first bytes say gzip
    with tempfile.NamedTemporaryFile(dir=blobs, prefix=".part-", delete=False) as target:
        part = Path(target.name)

        def put(data: bytes | memoryview) -> None:
            out = stream.compress(data)
            packed.update(out)
            target.write(out)

        try:
            for number, chunk in enumerate(source):
                saved.update(chunk)
                if kept is not None:
                    kept += chunk
                if number == 0 and bytes(chunk[:2]) == _GZIP_MAGIC:  # no tar or JSON starts so
                    gunzip = zlib.decompressobj(wbits=31)
                if gunzip is not None:
                    plain.update(tar := gunzip.decompress(chunk))
                put(chunk if gunzip is None else tar)
            if gunzip is not None:
                plain.update(tar := gunzip.flush())
                put(tar)
                if not gunzip.eof:
                    raise LayoutError(f"docker save's blob {digest} is a gzip stream cut short")
        except zlib.error as broken:
            part.unlink()
            raise LayoutError(f"docker save's blob {digest} is not a whole gzip stream ({broken})") from broken
        out = stream.flush()
        packed.update(out)
        target.write(out)
        written = target.tell()
    if "sha256:" + saved.hexdigest() != digest:
        part.unlink()
        raise LayoutError(f"docker save's blob {digest} has other bytes (sha256:{saved.hexdigest()})")
    if kept is not None:
        small[digest] = bytes(kept)
    zdigest = "sha256:" + packed.hexdigest()
    part.replace(blobs / zdigest.removeprefix("sha256:"))
    return zdigest, written, "sha256:" + (plain if gunzip is not None else saved).hexdigest()


def push_zstd(
    runner: Runner, layout: Path, ref: str, remote: str, tag: str, insecure: bool, timeout: float, stage: bool = False
) -> Result:
    """One try: skopeo copies the layout to `remote` as it is (no blob or manifest may change). With `stage`, to
    REPOSITORY@DIGEST only, so no tag names it before it is signed (`tag_digest` tags it then). On success its
    stdout carries the line `docker push` would print ("TAG: digest: sha256:... size: 0"), which the caller reads
    the digest from."""
    digest_file = layout.with_suffix(".digest")
    target = f"{split_tag(remote)[0]}@{manifest_digest(layout)}" if stage else remote
    argv = [
        "skopeo",
        "copy",
        "--preserve-digests",
        "--digestfile",
        str(digest_file),
        *(["--dest-tls-verify=false"] if insecure else []),
        f"oci:{layout}",
        f"docker://{target}",
    ]
    done = runner.watched(argv, Wait(f"copying {ref} to {target}", registry_of(remote), timeout))
    if not done.ok:
        return done
    digest = digest_file.read_text(encoding="utf-8").strip()
    return Result(done.argv, 0, f"{tag}: digest: {digest} size: 0\n", done.err)


def manifest_digest(layout: Path) -> str:
    """The digest of the one image manifest an OCI layout holds (what the registry will name it by)."""
    index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
    return str(index["manifests"][0]["digest"])


def tag_digest(runner: Runner, pinned: str, remote: str, insecure: bool, timeout: float) -> Result:
    """Put the tag `remote` on the image the registry has as `pinned` (REPOSITORY@DIGEST), byte for byte: its blobs
    are there already, so only the manifest goes."""
    tls = ["--src-tls-verify=false", "--dest-tls-verify=false"] if insecure else []
    argv = ["skopeo", "copy", "--preserve-digests", *tls, f"docker://{pinned}", f"docker://{remote}"]
    return runner.watched(argv, Wait(f"tagging {pinned} as {remote}", registry_of(remote), timeout))
