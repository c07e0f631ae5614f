"""gzip on every core (pgzip.py): one gzip member any reader reads, the same bytes however many threads compress it
and however the input arrives."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest

from dlimages.publish.pgzip import ParallelGzip

# Compressible and not: repeated random runs, zeros, then random bytes, over several blocks of 64 KiB.
DATA = os.urandom(5000) * 40 + bytes(100_000) + os.urandom(150_000)


def compressed(data: bytes, *, threads: int, piece: int, block: int = 1 << 16) -> bytes:
    stream, out = ParallelGzip(6, threads, block), bytearray()
    for start in range(0, len(data), piece):
        out += stream.compress(data[start : start + piece])
    return bytes(out + stream.flush())


def test_it_is_one_gzip_member_of_the_input() -> None:
    packed = compressed(DATA, threads=2, piece=70_001)
    reader = zlib.decompressobj(wbits=31)
    assert reader.decompress(packed) == DATA and reader.eof and not reader.unused_data  # one member, nothing after
    assert gzip.decompress(packed) == DATA
    assert len(packed) < len(DATA) * 0.7  # the blocks refer back into the block before them


@pytest.mark.parametrize(("threads", "piece"), [(1, 1 << 16), (2, 999), (4, 123_457), (3, len(DATA))])
def test_the_bytes_do_not_depend_on_threads_or_on_how_the_input_arrives(threads: int, piece: int) -> None:
    assert compressed(DATA, threads=threads, piece=piece) == compressed(DATA, threads=1, piece=len(DATA))


def test_empty_input_and_an_input_of_whole_blocks_are_whole_gzip_streams() -> None:
    assert gzip.decompress(compressed(b"", threads=2, piece=1)) == b""
    whole = DATA[: 4 << 16]
    assert gzip.decompress(compressed(whole, threads=2, piece=1 << 16)) == whole
