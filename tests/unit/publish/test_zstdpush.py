"""--compression zstd without an engine: the OCI layout written from `docker save`'s stream (layers zstd, config and
everything else byte for byte, the same bytes every time and whatever the number of threads), one save per image
whatever the registries, skopeo copying the layout as it is, and the refusals: a layer whose bytes are not its digest,
an engine older than Docker 25."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from dlimages.core.runner import Result, Runner
from dlimages.publish.push import PushError, push_image
from dlimages.publish.zstdpush import GZIP_LAYER, OLD_SAVE, ZSTD_LAYER, ZSTD_LEVEL, Archives, LayoutError, write_layout

LOCAL_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def saved(
    layers: list[bytes],
    *,
    bad: bool = False,
    index: bool = True,
    drop: bool = False,
    gzipped: bool = False,
    diff_ids: list[bytes] | None = None,
) -> tuple[bytes, bytes]:
    """A tar as Docker 25+'s `docker save` writes it, and the image's config; `gzipped`: as the containerd image
    store holds the layers; `diff_ids`: the layers the config names (default: `layers`)."""
    named = [sha(layer) for layer in (layers if diff_ids is None else diff_ids)]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": named}}).encode()
    stored = [gzip.compress(layer, mtime=0) for layer in layers] if gzipped else layers
    kind = LAYER_TAR + "+gzip" if gzipped else LAYER_TAR
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config), "size": 9},
            "layers": [{"mediaType": kind, "digest": sha(layer), "size": len(layer)} for layer in stored],
        }
    ).encode()
    layers = stored
    files = {f"blobs/sha256/{sha(blob)[7:]}": blob for blob in (*layers, config, manifest)}
    if bad:
        files[f"blobs/sha256/{sha(layers[0])[7:]}"] = layers[0] + b"x"
    if drop:
        del files[f"blobs/sha256/{sha(layers[0])[7:]}"]
    if index:
        files["index.json"] = json.dumps({"manifests": [{"digest": sha(manifest), "size": len(manifest)}]}).encode()
    files["manifest.json"] = b"[]"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue(), config


LAYERS = [os.urandom(3000) * 50 + bytes(200_000), b"small layer"]


def layout_files(layout: Path) -> dict[str, bytes]:
    return {str(path.relative_to(layout)): path.read_bytes() for path in sorted(layout.rglob("*")) if path.is_file()}


def test_the_layout_has_zstd_layers_that_decompress_to_the_saved_ones_and_the_config_byte_for_byte(
    tmp_path: Path,
) -> None:
    stream, config = saved(LAYERS)
    manifest = write_layout(io.BytesIO(stream), tmp_path / "layout")
    blobs = tmp_path / "layout" / "blobs" / "sha256"
    assert [layer["mediaType"] for layer in manifest["layers"]] == [ZSTD_LAYER, ZSTD_LAYER]
    for layer, plain in zip(manifest["layers"], LAYERS, strict=True):
        packed = (blobs / layer["digest"][7:]).read_bytes()
        assert sha(packed) == layer["digest"] and len(packed) == layer["size"]
        assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == plain
    assert (blobs / sha(config)[7:]).read_bytes() == config  # the image ID the registry will report
    index = json.loads((tmp_path / "layout" / "index.json").read_text())
    [entry] = index["manifests"]
    assert json.loads((blobs / entry["digest"][7:]).read_bytes()) == manifest
    assert sorted(path.name for path in blobs.iterdir()) == sorted(
        [layer["digest"][7:] for layer in manifest["layers"]] + [sha(config)[7:], entry["digest"][7:]]
    )  # the uncompressed layers and docker's own manifest are not kept


def test_gzip_layers_of_the_containerd_store_give_the_layout_the_classic_store_gives(tmp_path: Path) -> None:
    write_layout(io.BytesIO(saved(LAYERS)[0]), tmp_path / "classic")
    write_layout(io.BytesIO(saved(LAYERS, gzipped=True)[0]), tmp_path / "containerd")
    classic, containerd = layout_files(tmp_path / "classic"), layout_files(tmp_path / "containerd")
    assert classic == containerd  # the same config, the same zstd layers: the same manifest digest in the registry


def test_the_gzip_layout_has_gzip_layers_the_same_from_either_store(tmp_path: Path) -> None:
    """The gzip push from the containerd store (which keeps its layers uncompressed, or gzip when pulled)."""
    manifest = write_layout(io.BytesIO(saved(LAYERS)[0]), tmp_path / "classic", "gzip")
    write_layout(io.BytesIO(saved(LAYERS, gzipped=True)[0]), tmp_path / "containerd", "gzip")
    assert layout_files(tmp_path / "classic") == layout_files(tmp_path / "containerd")
    assert [layer["mediaType"] for layer in manifest["layers"]] == [GZIP_LAYER, GZIP_LAYER]
    blobs = tmp_path / "classic" / "blobs" / "sha256"
    for layer, plain in zip(manifest["layers"], LAYERS, strict=True):
        packed = (blobs / layer["digest"][7:]).read_bytes()
        assert sha(packed) == layer["digest"] and gzip.decompress(packed) == plain


def test_a_gzip_layer_that_is_not_the_configs_layer_is_refused(tmp_path: Path) -> None:
    other, _ = saved(LAYERS, gzipped=True, diff_ids=[LAYERS[0], b"another layer"])
    with pytest.raises(LayoutError, match=f"holds {sha(LAYERS[1])}, which is not the config's layer 1"):
        write_layout(io.BytesIO(other), tmp_path / "layout")
    stream, _ = saved(LAYERS, gzipped=True)
    whole = gzip.compress(LAYERS[0], mtime=0)
    broken = stream.replace(whole, whole[:-8] + bytes(8))  # its CRC and length zeroed
    with pytest.raises(LayoutError, match="is not a whole gzip stream"):
        write_layout(io.BytesIO(broken), tmp_path / "broken")


def test_the_same_image_gives_the_same_layout_whatever_the_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, _ = saved([os.urandom(1 << 20) * 6, b"x" * 3_000_000])
    seen = []
    for number, cpus in enumerate((1, 2, 8)):
        monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
        write_layout(io.BytesIO(stream), tmp_path / str(number))
        seen.append(layout_files(tmp_path / str(number)))
    assert seen[0] == seen[1] == seen[2]


def test_a_layer_whose_bytes_are_not_its_digest_or_that_is_missing_is_refused(tmp_path: Path) -> None:
    stream, _ = saved(LAYERS, bad=True)
    with pytest.raises(LayoutError, match="has other bytes"):
        write_layout(io.BytesIO(stream), tmp_path / "bad")
    stream, _ = saved(LAYERS, drop=True)
    with pytest.raises(LayoutError, match="lacks layer sha256:"):
        write_layout(io.BytesIO(stream), tmp_path / "missing")


def saver(stream: bytes, code: int = 0) -> tuple[Callable[[str], tuple[io.BytesIO, Callable[[], Result]]], list[str]]:
    calls: list[str] = []

    def save(ref: str) -> tuple[io.BytesIO, Callable[[], Result]]:
        calls.append(ref)
        return io.BytesIO(stream), lambda: Result(("docker", "save", ref), code, "", "no such image" if code else "")

    return save, calls


def engine(seen: list[list[str]]) -> Runner:
    def run(argv: list[str], **_: object) -> object:
        seen.append(argv)
        out = ""
        if argv[:3] == ["docker", "image", "inspect"] or argv[:3] == ["docker", "inspect", "--format"]:
            out = LOCAL_ID
        if argv[0] == "skopeo":
            Path(argv[argv.index("--digestfile") + 1]).write_text(DIGEST + "\n")
        if argv[:2] == ["docker", "info"]:
            out = '{"InsecureRegistryCIDRs": ["127.0.0.0/8"]}'
        code = 1 if argv[:3] == ["docker", "manifest", "inspect"] else 0
        err = "no such manifest: x" if code else ""

        class Completed:
            returncode, stdout, stderr = code, out, err

        return Completed()

    return Runner(run=run)  # type: ignore[arg-type]


def test_zstd_pushes_save_once_and_copy_the_layout_as_it_is(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    save, calls = saver(saved(LAYERS)[0])
    archives = Archives(tmp_path, save)
    out = io.StringIO()
    results = push_image(
        ["lab/x:v1"], ["127.0.0.1:5000", "registry.example.com"], runner=engine(seen), archives=archives, out=out
    )
    assert [r.digest for r in results] == [DIGEST, DIGEST] and all(r.ok for r in results)
    assert calls == ["lab/x:v1"]
    assert f"zstd level {ZSTD_LEVEL}: compressing lab/x:v1's layers" in out.getvalue()
    copies = [argv for argv in seen if argv[0] == "skopeo"]
    assert [argv[-1] for argv in copies] == [
        "docker://127.0.0.1:5000/lab/x:v1",
        "docker://registry.example.com/lab/x:v1",
    ]
    [layout] = archives.made.values()
    for argv in copies:
        assert "--preserve-digests" in argv and argv[-2] == f"oci:{layout}"
        assert not any(arg.startswith("--dest-compress") for arg in argv)  # compressed once, here
    assert "--dest-tls-verify=false" in copies[0] and "--dest-tls-verify=false" not in copies[1]
    assert not any(argv[:2] == ["docker", "push"] for argv in seen)  # never gzip through the engine
    archives.close()
    assert not archives.folder.exists()


@pytest.mark.parametrize(
    ("stream", "code", "says"),
    [
        (saved(LAYERS, index=False)[0], 0, OLD_SAVE),
        (b"", 1, "no such image"),
    ],
    ids=["docker-before-25", "save-failed"],
)
def test_a_failed_or_old_save_fails_the_push_and_leaves_no_layout(
    tmp_path: Path, stream: bytes, code: int, says: str
) -> None:
    save, _ = saver(stream, code)
    archives = Archives(tmp_path, save)
    with pytest.raises(PushError, match="1 of 1 pushes failed") as failed:
        push_image(["lab/x:v1"], ["127.0.0.1:5000"], runner=engine([]), archives=archives, out=io.StringIO())
    assert says in str(failed.value)
    assert list(archives.folder.iterdir()) == []
