"""Rate limits that stay global across `--workers N`: limits.py's token buckets kept in one shared memory file that
every worker maps, each take under a POSIX record lock on it (per process, so workers exclude each other; flock
would not: they inherit one open file description).

Layout: the global bucket (tokens, stamp), then an open-addressing table of per-client buckets (key hash, tokens,
stamp). A client's bucket is looked for among PROBE slots from its hash; when all are taken by others, a bucket
that has refilled (it holds no state worth keeping) or else the stalest one is given to it. A stamp of 0 marks a
bucket never used, which is full."""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import time

GLOBAL = struct.Struct("<dd")  # tokens, stamp
SLOT = struct.Struct("<Qdd")  # client key hash (0 = free), tokens, stamp
SLOTS = 1 << 16
PROBE = 16


def create_shared_file(slots: int = SLOTS) -> int:
    """A zeroed shared memory file for the buckets; its descriptor is handed to every worker."""
    fd = os.memfd_create("pdproxy-rate-limits", 0)
    os.ftruncate(fd, GLOBAL.size + slots * SLOT.size)
    return fd


def _key_hash(client: str) -> int:
    return int.from_bytes(hashlib.blake2b(client.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little") | 1


class SharedRateLimiter:
    """RateLimiter's interface (limits.py) over the shared file."""

    def __init__(self, fd: int, rate: float, burst: float, client_rate: float, client_burst: float,
                 slots: int = SLOTS):
        self.fd = fd
        self.slots = slots
        self.mem = mmap.mmap(fd, GLOBAL.size + slots * SLOT.size)
        self.rate = rate
        self.burst = max(burst or rate, 1.0)
        self.client_rate = client_rate
        self.client_burst = max(client_burst or client_rate, 1.0)

    @property
    def enabled(self) -> bool:
        return self.rate > 0 or self.client_rate > 0

    def admit(self, client: str) -> tuple[str, float] | None:
        """None when admitted, else (scope, retry_after_seconds)."""
        now = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the host
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            if self.client_rate > 0:
                offset = self._client_slot(_key_hash(client), now)
                wait = self._take(offset + 8, self.client_rate, self.client_burst, now)
                if wait:
                    return "client", wait
            if self.rate > 0:
                wait = self._take(0, self.rate, self.burst, now)
                if wait:
                    return "global", wait
            return None
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def _take(self, offset: int, rate: float, burst: float, now: float) -> float:
        tokens, stamp = GLOBAL.unpack_from(self.mem, offset)
        tokens = burst if stamp == 0 else min(burst, tokens + (now - stamp) * rate)
        if tokens >= 1.0:
            GLOBAL.pack_into(self.mem, offset, tokens - 1.0, now)
            return 0.0
        GLOBAL.pack_into(self.mem, offset, tokens, now)
        return (1.0 - tokens) / rate

    def _client_slot(self, key: int, now: float) -> int:
        start = key % self.slots
        spare = stalest = None
        stalest_stamp = float("inf")
        for i in range(PROBE):
            offset = GLOBAL.size + ((start + i) % self.slots) * SLOT.size
            held, tokens, stamp = SLOT.unpack_from(self.mem, offset)
            if held == key:
                return offset
            if spare is None and (held == 0 or tokens + (now - stamp) * self.client_rate >= self.client_burst):
                spare = offset
            if stamp < stalest_stamp:
                stalest, stalest_stamp = offset, stamp
        offset = spare if spare is not None else stalest
        SLOT.pack_into(self.mem, offset, key, 0.0, 0.0)  # a new client's bucket starts full
        return offset
