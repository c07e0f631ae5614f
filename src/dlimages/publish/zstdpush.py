"""`invoke push --compression zstd`: layers compressed with zstd at a fixed level instead of `docker push`'s gzip.

The engine's own push knows only gzip, and BuildKit's exporter on the `docker` driver ignores `compression=zstd`
(measured: the registry got gzip layers). So the image is streamed out of the engine once (`docker save`, read as
it comes, never written to disk whole) and each layer is compressed as it passes, on every core, into an OCI layout
in the repository's .work/ that holds only the compressed layers; skopeo copies that layout to each registry as it
is (`--preserve-digests`). The uncompressed bytes of every layer are hashed on the way and must be the layer's
digest. The image's config is kept byte for byte, so the registry's image has the local image ID.

The same image gives the same bytes, so the same manifest digest, push after push and host after host: the level is
fixed, the zstd library is the pinned `zstandard` wheel's, and zstd's multi-threaded output does not depend on the
number of threads (unit-tested). The OCI layout in `docker save`'s output needs Docker 25 or later.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import zstandard

from dlimages.core.runner import Result, Runner, byte_stream

COMPRESSIONS = ("gzip", "zstd")
OLD_SAVE = "--compression zstd needs Docker 25.0 or later to push from: its `docker save` writes an OCI layout"
ZSTD_LEVEL = 3  # fixed: another level gives other bytes, so another digest
SAVE_TIMEOUT_S = 3600.0
CHUNK = 1 << 20
SMALL = 1 << 22  # blobs up to this size are also kept as they are: the index, manifests and configs are among them
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar")

# `docker save REF` as a readable stream of its tar, and a function that waits for it and returns how it ended.
Saver = Callable[[str], tuple[IO[bytes], Callable[[], Result]]]


class LayoutError(Exception):
    """`docker save`'s output is not what an OCI layout of one image should be."""


def docker_save(ref: str) -> tuple[IO[bytes], Callable[[], Result]]:
    return byte_stream(["docker", "save", ref], SAVE_TIMEOUT_S)


class Archives:
    """The zstd OCI layout of each local image, made once and shared by every registry it goes to; deleted with the
    folder on `close`."""

    def __init__(self, root: Path, save: Saver = docker_save) -> None:
        (root / ".work").mkdir(exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="push-", dir=root / ".work"))
        self.made: dict[str, Path] = {}
        self.save = save

    def archive(self, runner: Runner, ref: str, local_id: str) -> tuple[Path | None, Result | None]:
        """The layout of `ref` (written now, or before for this image); the failed `docker save` otherwise.
        (`runner` is unused: the save is streamed, not captured.)"""
        del runner
        if local_id not in self.made:
            layout = self.folder / local_id.removeprefix("sha256:")[:16]
            stream, finish = self.save(ref)
            error = ""
            try:
                write_layout(stream, layout)
            except (LayoutError, tarfile.TarError, OSError) as problem:
                error = str(problem)
            finally:
                stream.close()
            saved = finish()
            if not saved.ok or error:
                shutil.rmtree(layout, ignore_errors=True)
                err = saved.err if not saved.ok else f"{error}\n{OLD_SAVE}"
                return None, Result(saved.argv, saved.code or 1, saved.out, err)
            self.made[local_id] = layout
        return self.made[local_id], None

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def write_layout(stream: IO[bytes], layout: Path) -> dict[str, Any]:
    """Read `docker save`'s tar from `stream` and write `layout`: an OCI layout of its one image with every layer
    compressed by zstd (ZSTD_LEVEL), the config as it was. Returns the new manifest. Raises LayoutError when a
    layer's bytes are not its digest or the tar is not an OCI layout of one image."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=max(1, os.cpu_count() or 1))
    small: dict[str, bytes] = {}  # digest -> bytes, for the blobs up to SMALL and index.json
    compressed: dict[str, tuple[str, int]] = {}  # uncompressed digest -> (compressed digest, size)
    with tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK) as archive:  # tarfile's 10 KiB reads cost seconds
        for member in archive:
            if not member.isfile():
                continue
            source = archive.extractfile(member)
            assert source is not None
            if member.name == "index.json":
                small["index.json"] = source.read()
            elif member.name.startswith("blobs/sha256/"):
                digest = "sha256:" + member.name.removeprefix("blobs/sha256/")
                compressed[digest] = _compress(source, digest, blobs, compressor, small, member.size)
    if "index.json" not in small:
        raise LayoutError("docker save wrote no index.json: the engine is older than Docker 25")
    index = json.loads(small["index.json"])
    if len(index.get("manifests", [])) != 1:
        raise LayoutError(f"docker save's index.json lists {len(index.get('manifests', []))} images, not one")
    manifest = json.loads(_blob(small, index["manifests"][0]["digest"]))
    layers = []
    for layer in manifest["layers"]:
        if layer["mediaType"] not in LAYER_TYPES:
            raise LayoutError(f"layer {layer['digest']} is {layer['mediaType']}, not an uncompressed tar")
        if layer["digest"] not in compressed:
            raise LayoutError(f"docker save's output lacks layer {layer['digest']}")
        digest, size = compressed[layer["digest"]]
        layers.append({**layer, "mediaType": ZSTD_LAYER, "digest": digest, "size": size})
    kept = {layer["digest"] for layer in layers}
    for zdigest, _ in compressed.values():  # the index, manifests and config go as docker saved them
        if zdigest not in kept:
            (blobs / zdigest.removeprefix("sha256:")).unlink(missing_ok=True)
    config = manifest["config"]["digest"]
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
    source: IO[bytes],
    digest: str,
    blobs: Path,
    compressor: zstandard.ZstdCompressor,
    small: dict[str, bytes],
    size: int,
) -> tuple[str, int]:
    """One blob through zstd into `blobs`, hashed before and after; kept as it is in `small` too if it is small."""
    plain, packed = hashlib.sha256(), hashlib.sha256()
    kept = bytearray() if size <= SMALL else None
    stream = compressor.compressobj()
    with tempfile.NamedTemporaryFile(dir=blobs, prefix=".part-", delete=False) as target:
        part = Path(target.name)
        while chunk := source.read(CHUNK):
            plain.update(chunk)
            if kept is not None:
                kept += chunk
            out = stream.compress(chunk)
            packed.update(out)
            target.write(out)
        out = stream.flush()
        packed.update(out)
        target.write(out)
        written = target.tell()
    if "sha256:" + plain.hexdigest() != digest:
        part.unlink()
        raise LayoutError(f"docker save's blob {digest} has other bytes (sha256:{plain.hexdigest()})")
    if kept is not None:
        small[digest] = bytes(kept)
    zdigest = "sha256:" + packed.hexdigest()
    part.replace(blobs / zdigest.removeprefix("sha256:"))
    return zdigest, written


def push_zstd(runner: Runner, layout: Path, ref: str, remote: str, tag: str, insecure: bool, timeout: float) -> Result:
    """One try: skopeo copies the layout to `remote` as it is (no blob or manifest may change). On success its stdout
    carries the line `docker push` would print ("TAG: digest: sha256:... size: 0"), which the caller reads the
    digest from."""
    digest_file = layout.with_suffix(".digest")
    argv = [
        "skopeo",
        "copy",
        "--quiet",
        "--preserve-digests",
        "--digestfile",
        str(digest_file),
        *(["--dest-tls-verify=false"] if insecure else []),
        f"oci:{layout}",
        f"docker://{remote}",
    ]
    done = runner(argv, timeout=timeout)
    if not done.ok:
        return done
    digest = digest_file.read_text(encoding="utf-8").strip()
    return Result(done.argv, 0, f"{tag}: digest: {digest} size: 0\n", done.err)
