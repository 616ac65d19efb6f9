"""Choosing an instance of one role: round robin, least connections (load-weighted), bounded-load consistent hash, plus sticky sessions.

The consistent-hash ring is our own ~40 lines rather than uhashring: bounded load needs to walk the ring past
instances that are over capacity, unavailable or already tried, which uhashring does not expose without
rebuilding or iterating its internals; bisect over a sorted list of blake2b points does it in microseconds.
"""

from __future__ import annotations

import hashlib
import math
import time
from bisect import bisect
from collections import OrderedDict

from .backend_pool import Backend, BackendPool

VNODES = 160


def _h64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class RoundRobin:
    def __init__(self, pool: BackendPool):
        self.pool = pool
        self.next = 0

    def pick(self, key: str | None, exclude, session: str | None = None) -> Backend | None:
        avail = self.pool.available()
        n = len(avail)
        for i in range(n):
            b = avail[(self.next + i) % n]
            if b not in exclude:
                self.next = (self.next + i + 1) % n
                return b
        return None


class LeastConnections:
    """Least in-flight load per unit of weight; a request's load is 1 + prompt bytes/4096 (a rough token weight).
    Ties rotate so that an idle cluster still spreads requests instead of always picking the first instance."""

    def __init__(self, pool: BackendPool):
        self.pool = pool
        self.rot = 0

    def pick(self, key: str | None, exclude, session: str | None = None) -> Backend | None:
        avail = self.pool.available()
        n = len(avail)
        if n == 0:
            return None
        self.rot = (self.rot + 1) % n
        best = None
        best_load = math.inf
        for i in range(n):
            b = avail[(self.rot + i) % n]
            if b in exclude:
                continue
            load = b.inflight_load / b.weight
            if load < best_load:
                best, best_load = b, load
        return best


class ConsistentHash:
    """Consistent hashing with bounded load (Mirrokni et al.): an instance takes a key only while its in-flight
    count is below ceil(load_factor * (total in-flight + 1) / healthy instances)."""

    def __init__(self, pool: BackendPool, load_factor: float = 1.25):
        self.pool = pool
        self.load_factor = load_factor
        self.version = -1
        self.points: list[int] = []
        self.owners: list[Backend] = []
        self.fallback = LeastConnections(pool)

    def _rebuild(self):
        ring = []
        for b in self.pool.backends:
            for i in range(int(VNODES * b.weight)):
                ring.append((_h64(f"{b.addr}#{i}".encode()), b))
        ring.sort(key=lambda t: t[0])
        self.points = [p for p, _ in ring]
        self.owners = [b for _, b in ring]
        self.version = self.pool.version

    def pick(self, key: str | None, exclude, session: str | None = None) -> Backend | None:
        if key is None:
            return self.fallback.pick(None, exclude)
        if self.version != self.pool.version:
            self._rebuild()
        avail = self.pool.available()
        if not avail:
            return None
        total = sum(b.inflight for b in avail)
        cap = math.ceil(self.load_factor * (total + 1) / len(avail))
        owners = self.owners
        n = len(owners)
        start = bisect(self.points, _h64(key.encode()))
        seen = set()
        for i in range(n):
            b = owners[(start + i) % n]
            if b in seen:
                continue
            seen.add(b)
            if b.state == "healthy" and b not in exclude and b.inflight < cap:
                return b
        return self.fallback.pick(None, exclude)


class Sticky:
    """Remembers which instance served a session key; reuses it while it is healthy (TTL, bounded LRU). Only
    wraps a policy when --sticky-header is set; the policies themselves take and ignore `session`."""

    def __init__(self, inner, ttl: float, max_entries: int = 100_000):
        self.inner = inner
        self.uses_prompt = getattr(inner, "uses_prompt", False)
        self.ttl = ttl
        self.max_entries = max_entries
        self.table: OrderedDict[str, tuple[Backend, float]] = OrderedDict()

    def pick(self, key: str | None, exclude, session: str | None = None) -> Backend | None:
        if session is None:
            return self.inner.pick(key, exclude)
        now = time.monotonic()
        hit = self.table.get(session)
        if hit is not None:
            b, seen = hit
            if now - seen < self.ttl and b.state == "healthy" and not b.removed and b not in exclude:
                self.table[session] = (b, now)
                self.table.move_to_end(session)
                return b
        b = self.inner.pick(key, exclude)
        if b is not None:
            self.table[session] = (b, now)
            self.table.move_to_end(session)
            if len(self.table) > self.max_entries:
                self.table.popitem(last=False)
        return b


def make_balancer(policy: str, pool: BackendPool, load_factor: float):
    if policy == "round_robin":
        return RoundRobin(pool)
    if policy == "least_conn":
        return LeastConnections(pool)
    if policy == "consistent_hash":
        return ConsistentHash(pool, load_factor)
    raise ValueError(policy)
