"""gzip on every core, as pigz writes it: one gzip member whose deflate stream is cut into blocks compressed side by
side, each primed with the 32 KiB of input before it and ended on a byte boundary (a sync flush), the last one
finished. Any gzip reader reads it as one stream.

The bytes depend only on the input, the level, the block size and zlib: never on the number of threads or on how
the input arrives in pieces (unit-tested), so the same layer gives the same digest push after push. zlib releases
Python's lock while it compresses, so the threads really run side by side.
"""

from __future__ import annotations

import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

BLOCK = 1 << 20
WINDOW = 1 << 15  # what deflate may refer back to
# gzip's header: deflate, no flags, no time (0), no extra flags, operating system "unknown" (255).
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def _deflate(data: bytes, primer: bytes, level: int, last: bool) -> bytes:
    stream = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=primer)  # the first block's primer is empty: none
    return stream.compress(data) + stream.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


class ParallelGzip:
    """compress() and flush() as zlib's compress objects have them; the gzip member comes out in order."""

    def __init__(self, level: int, threads: int, block: int = BLOCK) -> None:
        self.level, self.block = level, block
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads))
        self.ahead = 2 * max(1, threads)  # blocks in flight at most
        self.pending = bytearray()
        self.primer = b""
        self.queue: deque[Future[bytes]] = deque()
        self.crc, self.size = 0, 0
        self.header = _HEADER  # still to write

    def compress(self, data: bytes | memoryview) -> bytes:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        self.pending += data
        out, self.header = bytearray(self.header), b""  # gzip's header, before the first bytes only
        while len(self.pending) >= self.block:
            self._submit(bytes(self.pending[: self.block]), last=False)
            del self.pending[: self.block]
            while len(self.queue) > self.ahead:
                out += self.queue.popleft().result()
        return bytes(out)

    def flush(self) -> bytes:
        out, self.header = bytearray(self.header), b""
        self._submit(bytes(self.pending), last=True)
        self.pending.clear()
        while self.queue:
            out += self.queue.popleft().result()
        self.pool.shutdown()
        out += (self.crc & 0xFFFFFFFF).to_bytes(4, "little") + (self.size & 0xFFFFFFFF).to_bytes(4, "little")
        return bytes(out)

    def _submit(self, data: bytes, *, last: bool) -> None:
        self.queue.append(self.pool.submit(_deflate, data, self.primer, self.level, last))
        self.primer = (self.primer + data)[-WINDOW:]
