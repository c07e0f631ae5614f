"""Which image store the engine keeps images in, and what it calls one image there.

An image is the same image when its config is: the config's digest names every layer by its uncompressed digest
(diff_id), so it is the identity a reproducible build keeps, on any engine. The classic overlay2 store uses that
digest as the image ID. The containerd image store (the default of fresh Docker 29+ installs) names an image by its
manifest's digest instead, which also depends on how the layers were compressed: BuildKit's metadata file gives
both (`containerimage.config.digest`, `containerimage.digest`), and a build is tagged by the one its store knows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from dlimages.core.imagestream import ArchiveError, TarStream, docker_save
from dlimages.core.references import DIGEST
from dlimages.core.runner import Runner

CLASSIC = "overlay2"
CONTAINERD = "containerd"
# Where a build goes: the engine's image store, as `--load` would, but with the layers kept uncompressed. The classic
# store ignores the setting (it keeps layers uncompressed and compresses them when pushing); the containerd store
# otherwise gzips every layer during the build, then unpacks them again. Measured on the PyTorch CI cell, 2 cores
# (docs/notes/measurements.md): its cold build took 1.6-2.1x the classic store's time this way, 2.7x with `--load`.
# So there a push compresses, as on the classic store (publish/zstdpush.py).
EXPORT = "--output=type=docker,compression=uncompressed,force-compression=true"
# `docker info`'s DriverStatus on the containerd store: [["driver-type", "io.containerd.snapshotter.v1"]]
_SNAPSHOTTER = "io.containerd.snapshotter"


def store_of(driver_status: str) -> str:
    """The store `docker info --format '{{json .DriverStatus}}'` describes."""
    return CONTAINERD if _SNAPSHOTTER in driver_status else CLASSIC


def image_store(runner: Runner) -> str:
    """The store of the engine `runner` talks to (the classic one where `docker info` does not say)."""
    done = runner.docker("info", "--format", "{{json .DriverStatus}}", timeout=30)
    return store_of(done.out) if done.ok else CLASSIC


@dataclass(frozen=True)
class Built:
    """What one build produced, from BuildKit's metadata file."""

    config: str  # the config digest: the image's identity (the classic store's image ID)
    manifest: str | None  # the manifest digest: the containerd store's image ID (None where BuildKit gave none)

    def local_id(self, store: str) -> str:
        """The name the engine knows the image by: what `docker tag` and `docker image inspect` take."""
        return self.manifest if store == CONTAINERD and self.manifest else self.config

    @classmethod
    def of(cls, metadata: object) -> Built | None:
        """From one target's entry of a metadata file (None when it names no image)."""
        if not isinstance(metadata, dict):
            return None
        config, manifest = metadata.get("containerimage.config.digest"), metadata.get("containerimage.digest")
        if not _is_digest(config):
            return None
        return cls(config, manifest if _is_digest(manifest) else None)

    @classmethod
    def read(cls, path: Path) -> Built | None:
        """From `docker buildx build --metadata-file PATH` (None when the file is missing or names no image)."""
        try:
            return cls.of(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError):
            return None


def config_digest(ref: str, runner: Runner, store: str, built: Built | None = None) -> str | None:
    """The config digest of the local image `ref` (None when there is none): its image ID on the classic store; on
    the containerd store, what its manifest names: `built`'s config when the engine knows `ref` by `built`'s manifest
    (one manifest names one config), else read from `docker save` (the engine's API of Docker 26 says no more; the
    stream is read to its end, a few seconds a gigabyte)."""
    local = runner.image_id(ref)
    if local is None or store != CONTAINERD:
        return local
    if built is not None and built.manifest == local:
        return built.config
    stream, finish = docker_save(ref)
    manifest = None
    try:
        archive = TarStream(stream)
        for name, _size, _regular in archive.members():
            if name == "manifest.json":
                manifest = json.loads(archive.read())
    except (ArchiveError, ValueError, OSError):
        manifest = None
    finally:
        stream.close()
        finish()
    return config_of(manifest)


def config_of(manifest: object) -> str | None:
    """The config digest `docker save`'s manifest.json names: `blobs/sha256/HEX` (containerd store, OCI layout) or
    `HEX.json` (classic store)."""
    if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
        return None
    name = str(manifest[0].get("Config", "")).rsplit("/", 1)[-1].removesuffix(".json")
    digest = f"sha256:{name}"
    return digest if _is_digest(digest) else None


def _is_digest(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and DIGEST.fullmatch(value) is not None
