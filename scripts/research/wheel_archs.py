#!/usr/bin/env python3
"""Read which GPU code a wheel's shared libraries carry, from their CUDA fatbin containers.

Every ``*.so*`` in the wheel is searched for fatbin containers (magic 0xBA55ED50); each entry header gives
its kind (cubin or PTX), its architecture, its ``a``/``f`` variant and, for PTX, the ISA version (layout
calibrated against nvcc 13.0's own output, see docs/notes/research-wheel-archs.md). A PTX entry's variant
is read from its ``.target`` line instead where the payload is plain or LZ4: TensorFlow packs sm_90a PTX
under a header that says plain sm_90. Containers in ``__nv_relfatbin`` are inputs of a device link, not
code that runs, so the summary leaves them out.

Prints JSON: ``{"files": {so_file: {sass: [...], ptx: [[arch, isa], ...], containers: {section: n}}},
"summary": {...}}``: the summary has the same lists for the whole wheel and counts, per GPU, the containers it
runs from SASS, only from PTX (and the highest ISA it must JIT) or not at all, naming the files of the last.

    python3 scripts/research/wheel_archs.py torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl
"""

from __future__ import annotations

import json
import re
import struct
import sys
import zipfile
from bisect import bisect_right
from dataclasses import dataclass

MAGIC = struct.pack("<I", 0xBA55ED50)
PTX, CUBIN = 1, 2
ARCH_SPECIFIC, FAMILY_SPECIFIC = 0x100000, 0x200000  # entry flags of sm_XXa / sm_XXf code
LZ4, ZSTD = 0x2000, 0x8000  # entry flags of the payload's compression
PTX_TARGET = re.compile(rb"\.target\s+sm_\d+([af]?)\b")
LINK_INPUTS = "__nv_relfatbin"
GPUS = (70, 75, 80, 86, 89, 90, 100, 103, 120)  # the x86_64 ones from Volta on


@dataclass(frozen=True)
class Entry:
    kind: int
    arch: int
    suffix: str  # "", "a" or "f"
    isa: tuple[int, int]  # PTX ISA for PTX entries

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == CUBIN else 'compute'}_{self.arch}{self.suffix}"

    def runs_on(self, gpu: int) -> bool:
        """sm_XY runs on the same major from minor Y up, sm_XYa on XY only; PTX on XY and above."""
        if self.suffix == "a":
            return gpu == self.arch
        if self.kind == CUBIN or self.suffix == "f":
            return gpu // 10 == self.arch // 10 and gpu >= self.arch
        return gpu >= self.arch


def elf_sections(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, end, name) of each section of a 64-bit little-endian ELF, sorted by offset."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<I4xQ8xQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][2]
    sections = []
    for name_off, _type, offset, size in headers:
        name = data[names_at + name_off : data.index(b"\0", names_at + name_off)].decode()
        sections.append((offset, offset + size, name))
    return sorted(sections)


def lz4_prefix(block: bytes, size: int) -> bytes:
    """The first ``size`` bytes (or more) that an LZ4 block decompresses to."""
    out, pos = bytearray(), 0

    def length(n: int) -> int:
        nonlocal pos
        while n >= 15 and pos < len(block):  # 15 (or 255 after it) means: add the next byte too
            pos += 1
            n += block[pos - 1]
            if block[pos - 1] != 255:
                break
        return n

    while pos < len(block) and len(out) < size:
        token = block[pos]
        pos += 1
        literals = length(token >> 4)
        out += block[pos : pos + literals]
        pos += literals
        if pos + 2 > len(block):
            break
        offset = block[pos] | block[pos + 1] << 8
        pos += 2
        for _ in range(length(token & 15) + 4):  # a match may overlap what it copies
            out.append(out[-offset])
    return bytes(out)


def ptx_suffix(payload: bytes, flags: int) -> str | None:
    """The a/f of a PTX payload's ``.target``, or None where it is compressed with ZSTD."""
    if flags & ZSTD:
        return None
    text = lz4_prefix(payload, 4096) if flags & LZ4 else payload[:4096]
    target = PTX_TARGET.search(text)
    return target.group(1).decode() if target else None


def container_entries(data: bytes, start: int) -> list[Entry] | None:
    """The entries of the container at ``start``, or None where the magic was a chance match."""
    version, header_size, size = struct.unpack_from("<HHQ", data, start + 4)
    end = start + header_size + size
    if version != 1 or header_size != 16 or end > len(data):
        return None
    entries, pos = [], start + header_size
    while pos < end:
        kind, entry_size, padded, packed = struct.unpack_from("<H2xIQI", data, pos)
        minor, major, arch = struct.unpack_from("<HHI", data, pos + 24)
        (flags,) = struct.unpack_from("<Q", data, pos + 40)
        if entry_size < 64 or kind not in (PTX, CUBIN):
            return None
        suffix = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY_SPECIFIC else ""
        if kind == PTX:
            target = ptx_suffix(data[pos + entry_size : pos + entry_size + (packed or padded)], flags)
            suffix = suffix if target is None else target
        entries.append(Entry(kind, arch, suffix, (major, minor)))
        pos += entry_size + padded
    return entries if pos == end else None


def so_containers(data: bytes) -> list[tuple[str, list[Entry]]]:
    """Every fatbin container of one shared library, with the ELF section that holds it."""
    sections = elf_sections(data)
    starts = [s[0] for s in sections]
    found, pos = [], data.find(MAGIC)
    while pos != -1:
        entries = container_entries(data, pos)
        if entries is not None:
            section = sections[bisect_right(starts, pos) - 1][2]
            found.append((section, entries))
        pos = data.find(MAGIC, pos + 4)
    return found


def isa_text(isa: tuple[int, int]) -> str:
    return f"{isa[0]}.{isa[1]}"


def read_wheel(path: str) -> dict[str, list[tuple[str, list[Entry]]]]:
    with zipfile.ZipFile(path) as wheel:
        names = [n for n in wheel.namelist() if n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1]]
        libraries = {name: so_containers(wheel.read(name)) for name in sorted(names)}
    return {name: found for name, found in libraries.items() if found}


def describe(found: list[tuple[str, list[Entry]]]) -> dict[str, object]:
    entries = sorted({e for _, es in found for e in es}, key=lambda e: (e.arch, e.suffix, e.isa))
    sections: dict[str, int] = {}
    for section, _ in found:
        sections[section] = sections.get(section, 0) + 1
    return {
        "sass": list(dict.fromkeys(e.name for e in entries if e.kind == CUBIN)),
        "ptx": [[e.name, isa_text(e.isa)] for e in entries if e.kind == PTX],
        "containers": sections,
    }


def coverage(libraries: dict[str, list[tuple[str, list[Entry]]]]) -> dict[str, object]:
    """Per GPU: containers it runs from SASS, only by JIT-compiling PTX (highest ISA needed), or not at all."""
    runtime = [(name, es) for name, found in libraries.items() for section, es in found if section != LINK_INPUTS]
    result: dict[str, object] = {}
    for gpu in GPUS:
        sass = ptx_only = 0
        isa = (0, 0)
        missing: dict[str, int] = {}
        for name, entries in runtime:
            if any(e.kind == CUBIN and e.runs_on(gpu) for e in entries):
                sass += 1
            elif jit := [e for e in entries if e.kind == PTX and e.runs_on(gpu)]:
                ptx_only += 1  # the driver JIT-compiles the PTX of the highest architecture it can run
                isa = max(isa, max(jit, key=lambda e: e.arch).isa)
            else:
                missing[name] = missing.get(name, 0) + 1
        row: dict[str, object] = {"sass": sass, "ptx_only": ptx_only, "none": sum(missing.values())}
        if ptx_only:
            row["jit_isa"] = isa_text(isa)
        if missing:
            row["none_in"] = missing
        result[f"sm_{gpu}"] = row
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    libraries = read_wheel(argv[1])
    every = [entry for found in libraries.values() for entry in found]
    report = {
        "wheel": argv[1].rsplit("/", 1)[-1],
        "files": {name: describe(found) for name, found in libraries.items()},
        "summary": {**describe(every), "gpus": coverage(libraries)},
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
