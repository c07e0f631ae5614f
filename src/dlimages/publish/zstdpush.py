"""`invoke push --compression zstd`: layers compressed with zstd at a fixed level instead of `docker push`'s gzip.

The engine's own push knows only gzip, and BuildKit's exporter on the `docker` driver ignores `compression=zstd`
(measured: the registry got gzip layers). skopeo does it: the image is saved from the engine once (`docker save`,
into the repository's .work/, on disk: it is as large as the image) and copied to each registry with
`--dest-compress-format zstd --dest-compress-level 3`. The same image and level give the same bytes, so the same
manifest digest, push after push: the digest that is signed and verified. skopeo reads the archive as the OCI layout
`docker save` writes since Docker 25: read as a Docker archive, skopeo would write the image's config again in another
key order, and the registry's image would have another ID than the local one (measured). Debian 12's skopeo (1.9)
cannot read from Docker 26's API directly (it speaks API 1.22, which 26 refuses), hence the archive.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from dlimages.core.runner import Result, Runner

COMPRESSIONS = ("gzip", "zstd")
OLD_SAVE = "--compression zstd needs Docker 25.0 or later to push from: its `docker save` writes an OCI layout"
ZSTD_LEVEL = 3  # fixed: another level gives other bytes, so another digest
SAVE_TIMEOUT_S = 3600.0


class Archives:
    """The `docker save` archive of each local image, made once and shared by every registry it goes to; deleted
    with the folder on `close`."""

    def __init__(self, root: Path) -> None:
        (root / ".work").mkdir(exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="push-", dir=root / ".work"))
        self.made: dict[str, Path] = {}

    def archive(self, runner: Runner, ref: str, local_id: str) -> tuple[Path | None, Result | None]:
        """The archive of `ref` (saved now, or before for this image); the failed `docker save` otherwise."""
        if local_id not in self.made:
            path = self.folder / f"{local_id.removeprefix('sha256:')[:16]}.tar"
            saved = runner(["docker", "save", "--output", str(path), ref], timeout=SAVE_TIMEOUT_S)
            if not saved.ok:
                return None, saved
            self.made[local_id] = path
        return self.made[local_id], None

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def push_zstd(runner: Runner, archive: Path, ref: str, remote: str, tag: str, insecure: bool, timeout: float) -> Result:
    """One try: skopeo copies the archive's `ref` to `remote` with zstd layers. On success its stdout carries the
    line `docker push` would print ("TAG: digest: sha256:... size: 0"), which the caller reads the digest from."""
    digest_file = archive.with_suffix(".digest")
    argv = [
        "skopeo",
        "copy",
        "--quiet",
        "--dest-compress-format",
        "zstd",
        "--dest-compress-level",
        str(ZSTD_LEVEL),
        "--digestfile",
        str(digest_file),
        *(["--dest-tls-verify=false"] if insecure else []),
        f"oci-archive:{archive}",
        f"docker://{remote}",
    ]
    done = runner(argv, timeout=timeout)
    if not done.ok and "index.json" in done.err:
        return Result(done.argv, done.code, done.out, f"{done.err}\n{OLD_SAVE}")
    if not done.ok:
        return done
    digest = digest_file.read_text(encoding="utf-8").strip()
    return Result(done.argv, 0, f"{tag}: digest: {digest} size: 0\n", done.err)
