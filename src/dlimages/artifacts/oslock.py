"""The OS package locks: the exact Debian packages of each offline base and of each cell's apt step, each `.deb`
with its SHA256, committed like the Python locks (resolved by generate/aptlock.py). Builds install those files and
nothing else (building/aptdebs.py), so the commit, not the archive's state on the day of the build, decides the
image. Here: the format, the paths, the digests of what a lock was resolved from, and staleness.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlimages.core import usage
from dlimages.core.errors import InputError, Problem
from dlimages.core.files import write_atomic
from dlimages.model.spec import Matrix

APT_LOCK = "apt.lock"  # beside a cell's Dockerfile: what its apt step installs on the base
BASE_APT_LOCK = "images/base-{os}.apt.lock"  # an offline base's packages (base_lock_path), for scripts/make-base.sh
FORMAT = 1  # bump when the layout changes, so every lock reads as stale
ARCH = "amd64"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"  # Debian's package debian-archive-keyring
# Debian's public archive and its security archive (what `invoke base` took before the OS packages were locked), by
# the last segment of their URL: a mirror serves each as MIRROR/<name>, and so does a local repository made by
# `invoke apt-repo`.
DEBIAN_PUBLIC = {
    "debian": "http://ftp.debian.org/debian",
    "debian-security": "http://security.debian.org/debian-security",
}


@dataclass(frozen=True)
class Distro:
    """An OS release as a lock resolves from it: its archives (by the last segment of their URL, the suites of each),
    components, the keyring its InRelease files are signed with, and where its archives are (`public`: the default
    when neither the build nor this host names a mirror)."""

    os: str  # matrix.yaml's name for it: debian12, ubuntu22.04
    family: str  # debian, ubuntu
    codename: str
    archives: Mapping[str, tuple[str, ...]]
    components: tuple[str, ...]
    keyring: str
    public: Mapping[str, str]  # archive -> the distribution's own URL

    @property
    def header(self) -> str:
        """Its lock's `Os:` header: debian12 (bookworm, amd64)."""
        return f"{self.os} ({self.codename}, {ARCH})"

    @classmethod
    def of(cls, os: str, family: str, codename: str) -> Distro:
        if family == "debian":
            archives = {"debian": (codename, f"{codename}-updates"), "debian-security": (f"{codename}-security",)}
            return cls(os, family, codename, archives, ("main",), KEYRING, DEBIAN_PUBLIC)
        archives = {"ubuntu": (codename, f"{codename}-updates", f"{codename}-security")}
        components = ("main", "restricted", "universe", "multiverse")
        keyring = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"  # Ubuntu's package ubuntu-keyring
        return cls(os, family, codename, archives, components, keyring, {"ubuntu": "http://archive.ubuntu.com/ubuntu"})


def distro_of(lock: AptLock) -> Distro:
    """The Distro a lock was resolved for (its `Os:` header)."""
    os = lock.os.split()[0]
    return Distro.of(os, "debian" if os.startswith("debian") else "ubuntu", lock.codename)


def offline_bases(matrix: Matrix) -> dict[str, Distro]:
    """The bases made here, from a lock of their own (matrix.yaml's OSes with `bootstrap`), by OS name."""
    return {name: Distro.of(name, os.family, os.codename) for name, os in matrix.os.items() if os.bootstrap}


def base_lock_path(os: str) -> str:
    """Where the lock of the offline base of `os` (matrix.yaml's name) is, from the repository root."""
    return BASE_APT_LOCK.format(os=os)


_LINE = re.compile(
    r"^(?P<name>[a-z0-9][a-z0-9+.-]+)=(?P<version>[A-Za-z0-9.+~:-]+) (?P<archive>[a-z-]+) "
    r"(?P<path>pool/[A-Za-z0-9._+~/-]+\.deb) (?P<size>[0-9]+) sha256:(?P<sha256>[0-9a-f]{64})$"
)
_HEADER = re.compile(r"^# (?P<key>[A-Z][a-z]+): (?P<value>.*)$")


@dataclass(frozen=True, order=True)
class Deb:
    """One locked package: the file of that version in its archive's pool, and its SHA256 from the signed index."""

    name: str
    version: str
    archive: str  # a key of its Distro's archives
    path: str  # in the archive: pool/main/g/glibc/libc6_2.36-9+deb12u14_amd64.deb
    size: int
    sha256: str

    @property
    def spec(self) -> str:
        return f"{self.name}={self.version}"

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def line(self) -> str:
        return f"{self.spec} {self.archive} {self.path} {self.size} sha256:{self.sha256}"


@dataclass(frozen=True)
class AptLock:
    """A lock file: its packages, what it was resolved from (`input`, a digest) and when (`resolved`, UTC: the
    time a snapshot archive is asked at); a cell's lock also names the digest of the base lock it sits on."""

    part: str
    debs: tuple[Deb, ...]
    input: str
    resolved: str  # 20261201T194500Z
    os: str  # the OS, its codename and the architecture: debian12 (bookworm, amd64)
    base: str = ""  # a cell's lock: the digest of the base lock's text, or the pulled base (name:tag@digest)

    def text(self) -> str:
        head = [
            f"Generated by `{usage.LOCK}` from Debian's archive: do not edit; `{usage.LOCK} --upgrade-apt` "
            "takes the archive's newest packages",
            f"Part: {self.part}",
            f"Os: {self.os}",
            f"Resolved: {self.resolved}",
            *([f"Base: {self.base}"] if self.base else []),
            f"Input: {self.input}",
        ]
        return "".join(f"# {line}\n" for line in head) + "".join(f"{deb.line()}\n" for deb in self.debs)

    def digest(self) -> str:
        return f"sha256:{hashlib.sha256(self.text().encode()).hexdigest()}"

    @classmethod
    def parse(cls, text: str, where: str) -> AptLock:
        """The lock in `text` (InputError naming `where` and the line when it is not one)."""
        fields: dict[str, str] = {}
        debs: list[Deb] = []
        for number, line in enumerate(text.splitlines(), start=1):
            header, entry = _HEADER.match(line), _LINE.match(line)
            if header:
                fields[header.group("key")] = header.group("value")
            elif entry:
                values = entry.groupdict()
                debs.append(Deb(**{**values, "size": int(values["size"])}))  # type: ignore[arg-type]
            elif line.strip() and not line.startswith("#"):
                said = f"not a lock line: {line[:80]!r}"
                raise InputError([Problem(f"{where}:{number}", said, "NAME=VERSION ARCHIVE PATH SIZE sha256:HEX")])
        missing = [key for key in ("Part", "Os", "Resolved", "Input") if key not in fields]
        if missing:  # no package is fine: a package set the base already holds
            what = f"no {', '.join(missing)} header"
            raise InputError([Problem(where, f"not a complete apt lock: {what}", f"run `{usage.LOCK} --upgrade-apt`")])
        part, input_, resolved, os = (fields[key] for key in ("Part", "Input", "Resolved", "Os"))
        return cls(part, tuple(debs), input_, resolved, os, fields.get("Base", ""))

    @property
    def codename(self) -> str:
        return self.os.partition("(")[2].partition(",")[0]


def _digest(fields: Mapping[str, object]) -> str:
    canonical = json.dumps({"format": FORMAT, **fields}, sort_keys=True, separators=(",", ":")).encode()
    return f"sha256:{hashlib.sha256(canonical).hexdigest()}"


def base_input(distro: Distro) -> str:
    return _digest({"os": distro.os, "arch": ARCH, "archives": dict(distro.archives), "variant": "minbase"})


def cell_input(packages: Sequence[str], base: str, os: str) -> str:
    """What a cell's apt lock is resolved from: the package set and the base it goes on (the base lock's digest,
    or the pulled base by digest)."""
    return _digest({"os": os, "arch": ARCH, "packages": sorted(packages), "base": base})


def read(path: Path) -> AptLock | None:
    """The lock at `path`, None when there is none (InputError when it is not a lock)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError([Problem(str(path), f"cannot read: {error}")]) from None
    return AptLock.parse(text, str(path))


def stale(root: Path, lock_path: Path, packages: Sequence[str] | None, on: Distro | tuple[str, str]) -> str:
    """Why the lock at `lock_path` (the base's when `packages` is None, else a cell's with those packages) does not
    match its input now: "" when it does, "missing" when there is none. `on`: the offline base's Distro, for its
    lock and the cells on it, or (OS, base by digest) for a cell on a pulled base."""
    lock = read(lock_path)
    if lock is None:
        return "missing"
    if isinstance(on, tuple):
        os, ref = on
        if lock.base != ref:
            return f"resolved on another base than {ref}"
        return "" if lock.input == cell_input(packages or [], ref, os) else "resolved from another package set"
    if packages is None:
        return "" if lock.input == base_input(on) else "resolved for another base definition"
    path = base_lock_path(on.os)
    base = read(root / path)
    if base is None:
        return f"{path} is missing"
    if lock.base != base.digest():
        return f"resolved on another {path}"
    return "" if lock.input == cell_input(packages, base.digest(), on.os) else "resolved from another package set"


def moved(before: AptLock | None, after: AptLock) -> list[str]:
    """What a re-lock changed, one line per package: `name old -> new`, `+name version`, `-name version` (for a
    first lock, how many packages it holds)."""
    if before is None:
        return [f"{len(after.debs)} packages"]
    old = {deb.name: deb.version for deb in before.debs}
    new = {deb.name: deb.version for deb in after.debs}
    lines = [f"{n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]]
    lines += [f"+{n} {new[n]}" for n in sorted(new.keys() - old.keys())]
    return lines + [f"-{n} {old[n]}" for n in sorted(old.keys() - new.keys())]


def write(path: Path, lock: AptLock) -> None:
    write_atomic(path, lock.text())
