"""Disk space on the Docker data root: what is free, what the engine holds, what can be given back, and the layers
the engine itself has lost track of.

The images are about 6 GB each and a cold build holds about twice that at its peak (the framework layer exists once
as BuildKit's snapshot and once as the image's layer), so a build host fills up quickly. Two things free space:
- BuildKit's cache (`docker builder prune --all`) and dangling images: the engine knows their sizes.
- Leaked layers: overlay2 folders that no image, container or BuildKit record refers to any more. Upstream reports
  them for parallel builds on BuildKit 0.12 and later (moby/moby#46136; docker/buildx#2061 for bake) and for engines
  that ran out of disk mid-build (moby/moby#45939). No docker command removes or counts them (`docker system df`
  omits them). On this project's build host, after a day of builds, bakes and CI runs (one of which filled the
  disk), 90 such folders held 60 GB against 12 GB of images; a sequential build, a one-target bake and two bakes at
  once, each followed by `docker image rm` and `docker builder prune --all`, leaked nothing when measured alone
  (docs/measurements.md), so the exact trigger is not pinned down. `leaked_layers` finds them from the engine's own
  records (layerdb, and the live pages of BuildKit's bolt databases, read here) and `remove_leaked` deletes them.

Everything here reads the data root's files, so it works only where the engine keeps its data on this machine
(`DataRoot.local`); a remote engine (DOCKER_HOST elsewhere) is reported, never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dlimages.runner import Runner

GB = 10**9
LINKS = "l"  # overlay2's folder of short symlinks, one per layer folder (kept short for the mount options' length)
# A folder younger than this is never called leaked: a build that has just started may not have recorded it yet.
MIN_AGE_S = 15 * 60
RECLAIM_TIMEOUT_S = 30 * 60
# Measured on the Docker data root (free space sampled every second) for a cold build of the PyTorch CI cell
# (torch 2.1.2, Python 3.11, 5.9 GB image) after `docker builder prune --all`: 8.0 GB at the peak, 5.5 GB kept
# (the image and its cache). Cells on nvidia/cuda bases add their base (about 3 GB runtime, 8 GB devel).
COLD_BUILD_PEAK = 8 * GB
COLD_BUILD_KEPT = 6 * GB


@dataclass(frozen=True)
class DataRoot:
    """Where the engine keeps images and layers, and with which storage driver."""

    path: Path
    driver: str
    local: bool  # the folder is on this machine and readable: leaked layers can be counted and removed

    @property
    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free if self.local else 0


@dataclass(frozen=True)
class Leak:
    name: str  # the folder's name under overlay2/
    size: int  # bytes, counted the way du counts them (allocated blocks)
    link: str | None  # its short name under overlay2/l/, when it has one


@dataclass(frozen=True)
class Usage:
    """What the engine holds on its data root, as the engine counts it, plus what it no longer counts."""

    root: DataRoot
    free: int
    images: int
    build_cache: int
    build_cache_reclaimable: int
    leaked: tuple[Leak, ...]

    @property
    def leaked_bytes(self) -> int:
        return sum(leak.size for leak in self.leaked)

    def describe(self) -> list[str]:
        lines = [
            f"data root: {self.root.path} ({self.root.driver}"
            + ("" if self.root.local else ", on another machine: only the engine's own counts")
            + ")",
            f"free: {gb(self.free)}" if self.root.local else "free: unknown (the data root is not on this machine)",
            f"images: {gb(self.images)}",
            f"build cache: {gb(self.build_cache)} ({gb(self.build_cache_reclaimable)} reclaimable)",
        ]
        if self.root.local and self.root.driver == "overlay2":
            lines.append(
                f"leaked layers: {gb(self.leaked_bytes)} in {len(self.leaked)} folder(s) that no image, container or "
                "BuildKit record uses (moby/moby#46136)"
            )
        return lines


def gb(size: int) -> str:
    return f"{size / GB:.1f} GB"


def data_root(runner: Runner) -> DataRoot | None:
    """The engine's data root (None when no engine answers)."""
    done = runner.docker("info", "--format", "{{json .DockerRootDir}} {{json .Driver}}", timeout=30)
    if not done.ok:
        return None
    try:
        path, driver = (json.loads(word) for word in done.out.split())
    except ValueError:
        return None
    root = Path(path)
    return DataRoot(root, driver, _is_local(root))


def _is_local(root: Path) -> bool:
    """The engine is this machine's (a unix socket) and its data root is readable here."""
    host = os.environ.get("DOCKER_HOST", "")
    return (not host or host.startswith("unix://")) and (root / "image").is_dir()


def usage(runner: Runner, root: DataRoot, *, now: float | None = None, min_age_s: float = MIN_AGE_S) -> Usage:
    """The engine's own counts (`docker system df`) and, for a local overlay2 data root, the leaked layers."""
    images = cache = reclaimable = 0
    done = runner.docker("system", "df", "--format", "{{json .}}", timeout=120)
    for line in done.out.splitlines() if done.ok else ():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("Type") == "Images":
            images = _size(row.get("Size", ""))
        elif row.get("Type") == "Build Cache":
            cache = _size(row.get("Size", ""))
            reclaimable = _size(str(row.get("Reclaimable", "")).split(" ")[0])
    leaked = leaked_layers(root.path, now=now, min_age_s=min_age_s) if root.local and root.driver == "overlay2" else []
    return Usage(root, root.free_bytes, images, cache, reclaimable, tuple(leaked))


_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def _size(text: str) -> int:
    """Docker's human sizes ('11.78GB', '935.6MB', '0B') in bytes; 0 for anything else."""
    text = text.strip()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            try:
                return int(float(text[: -len(unit)]) * _UNITS[unit])
            except ValueError:
                return 0
    return 0


# --- leaked layers ----------------------------------------------------------------------------------------------------


def referenced_layers(root: Path) -> set[str]:
    """Every overlay2 folder the engine's records name: image layers (layerdb cache-id), containers' layers and their
    init layers (layerdb mounts), BuildKit's snapshots (its bolt databases hold each snapshot's folder name), and,
    transitively, the lower layers of each of those."""
    layerdb = root / "image" / "overlay2" / "layerdb"
    named = {
        _read(path)
        for pattern in ("sha256/*/cache-id", "mounts/*/mount-id", "mounts/*/init-id")
        for path in layerdb.glob(pattern)
    }
    named.discard("")
    overlay = root / "overlay2"
    candidates = [entry.name for entry in _folders(overlay)]
    # BuildKit names its snapshots (the folder names) in its bolt databases: every key and value of their live
    # pages counts. A file that does not parse is searched as raw bytes instead, free pages and all: a name that
    # lingers in a free page then keeps a folder, which is safe, only less thorough (measured after a CI run, when
    # that was the only way: 21 folders, 17.9 GB, named only in free pages of snapshots.db).
    for path in sorted((root / "buildkit").glob("*.db")):
        data = _read_bytes(path)
        words = bolt_words(data)
        live = data if words is None else b"\0".join(sorted(words))  # a name may sit inside a longer value
        named |= {name for name in candidates if name.encode() in live}
    return _with_lowers(overlay, named)


# --- bolt (go.etcd.io/bbolt), read only ----------------------------------------------------------------------------

_BOLT_MAGIC = 0xED0CDAED
_BRANCH, _LEAF, _META = 0x01, 0x02, 0x04
_BUCKET = 0x01  # a leaf element whose value is a nested bucket
_PAGE_HEADER = struct.Struct("<QHHI")  # id, flags, count, overflow
_META_BODY = struct.Struct(
    "<IIIIQQQQQQ"
)  # magic, version, page size, flags, root (pgid, seq), freelist, pgid, txid, sum
_BRANCH_ELEMENT = struct.Struct("<IIQ")  # pos, ksize, pgid
_LEAF_ELEMENT = struct.Struct("<IIII")  # flags, pos, ksize, vsize


def bolt_words(data: bytes) -> set[bytes] | None:
    """Every key and value reachable from the newest valid meta page of a bolt file (nested buckets included), or
    None when the file is not one this reader understands (then the caller falls back to the raw bytes).

    Reads a copy taken at once; a database written meanwhile may give a torn copy, which fails a bound check here
    and falls back too. Format: bbolt's page.go, node.go and bucket.go (page header, branch and leaf elements,
    inline buckets)."""
    try:
        return _bolt_words(data)
    except (struct.error, ValueError, RecursionError):
        return None


def _bolt_words(data: bytes) -> set[bytes]:
    first = _META_BODY.unpack_from(data, _PAGE_HEADER.size)
    if first[0] != _BOLT_MAGIC:
        raise ValueError("not a bolt file")
    page_size = first[2]
    if page_size < 512 or page_size > 1 << 20 or len(data) < 2 * page_size:
        raise ValueError("bad page size")
    metas = [_META_BODY.unpack_from(data, page * page_size + _PAGE_HEADER.size) for page in (0, 1)]
    # The meta page of the newest transaction holds the live root bucket (fields: magic 0, root 4, txid 8).
    root = max((meta for meta in metas if meta[0] == _BOLT_MAGIC), key=lambda meta: meta[8])[4]
    words: set[bytes] = set()
    seen: set[int] = set()

    def walk(buffer: bytes, offset: int) -> None:
        _, flags, count, _ = _PAGE_HEADER.unpack_from(buffer, offset)
        if flags & _BRANCH:
            for index in range(count):
                element = offset + _PAGE_HEADER.size + index * _BRANCH_ELEMENT.size
                pos, ksize, child = _BRANCH_ELEMENT.unpack_from(buffer, element)
                words.add(_slice(buffer, element + pos, ksize))
                visit(child)
        elif flags & _LEAF:
            for index in range(count):
                element = offset + _PAGE_HEADER.size + index * _LEAF_ELEMENT.size
                kind, pos, ksize, vsize = _LEAF_ELEMENT.unpack_from(buffer, element)
                words.add(_slice(buffer, element + pos, ksize))
                value = _slice(buffer, element + pos + ksize, vsize)
                if kind & _BUCKET:
                    bucket_root = struct.unpack_from("<Q", value)[0]
                    if bucket_root == 0:
                        walk(value, 16)  # an inline bucket: its page follows the bucket header in the value
                    else:
                        visit(bucket_root)
                else:
                    words.add(value)
        else:
            raise ValueError(f"page flags {flags:#x} where a branch or leaf page should be")

    def visit(page: int) -> None:
        if page in seen or page < 2 or (page + 1) * page_size > len(data):
            raise ValueError(f"page {page} is out of bounds or visited twice")
        seen.add(page)
        walk(data, page * page_size)

    visit(root)
    return words


def _slice(buffer: bytes, start: int, size: int) -> bytes:
    if start < 0 or size < 0 or start + size > len(buffer):
        raise ValueError("an element points outside its page")
    return buffer[start : start + size]


def _with_lowers(overlay: Path, named: set[str]) -> set[str]:
    links = {}
    for entry in (overlay / LINKS).iterdir() if (overlay / LINKS).is_dir() else ():
        target = os.readlink(entry) if entry.is_symlink() else ""
        links[entry.name] = Path(target).parent.name  # l/ABC -> ../<folder>/diff
    keep = set(named)
    todo = list(named)
    while todo:
        lower = _read(overlay / todo.pop() / "lower")
        for part in filter(None, lower.split(":")):
            folder = links.get(Path(part).name, "")
            if folder and folder not in keep:
                keep.add(folder)
                todo.append(folder)
    return keep


def leaked_layers(root: Path, *, now: float | None = None, min_age_s: float = MIN_AGE_S) -> list[Leak]:
    """overlay2 folders nothing refers to and nothing has changed for `min_age_s`, largest first."""
    overlay = root / "overlay2"
    if not overlay.is_dir():
        return []
    keep = referenced_layers(root)
    moment = time.time() if now is None else now
    leaks = []
    for entry in _folders(overlay):
        if entry.name in keep or entry.name.removesuffix("-init") in keep:
            continue
        if moment - _newest_mtime(entry) < min_age_s:
            continue
        leaks.append(Leak(entry.name, _allocated(entry), _read(entry / "link") or None))
    return sorted(leaks, key=lambda leak: (-leak.size, leak.name))


def remove_leaked(root: Path, leaks: Iterable[Leak]) -> int:
    """Delete the leaked folders and their short links; return the bytes the disk got back (measured, not summed)."""
    overlay = root / "overlay2"
    before = shutil.disk_usage(root).free
    for leak in leaks:
        folder = overlay / leak.name
        if folder.parent != overlay or leak.name in ("", LINKS, ".", ".."):
            raise ValueError(f"not a layer folder: {leak.name!r}")
        if leak.link:
            (overlay / LINKS / leak.link).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
    return max(0, shutil.disk_usage(root).free - before)


def _folders(overlay: Path) -> list[Path]:
    try:
        return sorted(entry for entry in overlay.iterdir() if entry.is_dir() and entry.name != LINKS)
    except OSError:
        return []


def _newest_mtime(folder: Path) -> float:
    """The newest change to the folder or its first level (diff/, work/, link): a build writing into it moves this."""
    times = [folder.stat().st_mtime]
    for child in ("diff", "work", "link", "lower", "committed"):
        try:
            times.append((folder / child).stat().st_mtime)
        except OSError:
            pass
    return max(times)


def _allocated(folder: Path) -> int:
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


# --- giving space back ------------------------------------------------------------------------------------------------

PRUNE_CACHE = ("builder", "prune", "--all", "--force")
PRUNE_DANGLING = ("image", "prune", "--force")


@dataclass(frozen=True)
class Reclaimed:
    steps: tuple[tuple[str, int], ...]  # (what, bytes the disk got back, measured with statvfs around the step)
    failures: tuple[str, ...]
    kept: tuple[str, ...] = ()  # what was not touched because enough was free already

    @property
    def total(self) -> int:
        return sum(size for _, size in self.steps)


def reclaim(runner: Runner, root: DataRoot, *, need: int = 0, now: float | None = None) -> Reclaimed:
    """Give back what can be remade, the cheapest loss first, and stop once `need` bytes are free (0: everything):
    the leaked layers (nothing uses them), dangling images, then BuildKit's whole cache (the next builds are cold)
    and the layers only that cache held. Tagged images and containers are kept."""
    steps: list[tuple[str, int]] = []
    failures: list[str] = []
    kept: list[str] = []

    def remove_leaks(what: str) -> None:
        if root.local and root.driver == "overlay2":
            leaks = leaked_layers(root.path, now=now)
            steps.append((f"{what} ({len(leaks)} folders)", remove_leaked(root.path, leaks)))

    remove_leaks("leaked layers")
    for what, argv in (("dangling images", PRUNE_DANGLING), ("build cache", PRUNE_CACHE)):
        if need > 0 and root.local and root.free_bytes >= need:
            kept.append(f"{what}: {gb(root.free_bytes)} free, {gb(need)} needed")
            continue
        before = root.free_bytes
        done = runner.docker(*argv, timeout=RECLAIM_TIMEOUT_S)
        if done.ok:
            steps.append((what, max(0, root.free_bytes - before)))
        else:
            failures.append(f"`docker {' '.join(argv)}` failed: {done.last_line}")
        if argv == PRUNE_CACHE:
            remove_leaks("layers only the build cache held")
    return Reclaimed(tuple(steps), tuple(failures), tuple(kept))


def build_need(builds: int) -> int:
    """Free space that `builds` cold builds one after another need at their peak: the last one's peak and what the
    ones before it keep."""
    return COLD_BUILD_PEAK + COLD_BUILD_KEPT * max(0, builds - 1) if builds > 0 else 0


def shortfall(root: DataRoot, need: int, *, reclaimed: bool) -> str | None:
    """None when `need` bytes are free on the data root (or it cannot be measured here); else what to do about it."""
    if need <= 0 or not root.local:
        return None
    free = root.free_bytes
    if free >= need:
        return None
    message = f"{gb(free)} free on the Docker data root {root.path}, {gb(need)} needed"
    if reclaimed:
        return (
            f"{message}, after giving back the build cache and the leaked layers: the rest is images and containers "
            "(`docker image ls`, `docker image rm` the ones you no longer need) or other files on that disk"
        )
    return f"{message}: `invoke disk` shows what the engine holds, `invoke disk --reclaim` gives back what it can"
