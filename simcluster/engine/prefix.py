"""Prefix KV tiers a Prefill consults before computing: the Mooncake pool, then AscendStore (memcached).

A block is found only if its bytes are exactly the bytes the block hash implies, so a store that
returns garbage counts as a miss, never as a hit. Backups run in a thread pool after the response:
the request never waits for them (AscendStore's asynchronous backup).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from simcluster.ascendstore import AscendStore
from simcluster.engine import textgen
from simcluster.kvpool import KVPoolClient

log = logging.getLogger("simcluster.engine")


class PrefixTiers:
    def __init__(self, *, model: str, block_bytes: int, metrics, ascendstore_servers: list[str],
                 kvpool_socket: str | None):
        self.model = model
        self.block_bytes = block_bytes
        self.m = metrics
        self.tiers = []
        if kvpool_socket:
            self.tiers.append(("mooncake", KVPoolClient(kvpool_socket)))
        if ascendstore_servers:
            self.tiers.append(("ascendstore", AscendStore(ascendstore_servers)))
        # One worker per tier keeps each non-thread-safe client on one thread.
        self.pools = {name: ThreadPoolExecutor(1, thread_name_prefix=f"kv-{name}") for name, _ in self.tiers}

    @property
    def enabled(self) -> bool:
        return bool(self.tiers)

    def _key(self, block_hash: str) -> str:
        return f"simkv:{block_hash}"

    def _expected(self, block_hash: str) -> bytes:
        return textgen.block_bytes(block_hash, self.block_bytes)

    def _leading_hits(self, client, hashes: list[str]) -> int:
        hits = 0
        for h in hashes:
            try:
                value = client.get(self._key(h))
            except (OSError, ConnectionError) as exc:
                log.warning("KV tier lookup failed: %s", exc)
                break
            if value != self._expected(h):
                break
            hits += 1
        return hits

    async def lookup(self, hashes: list[str]) -> int:
        """How many leading blocks some tier can supply (the best tier wins)."""
        best = 0
        loop = asyncio.get_running_loop()
        for name, client in self.tiers:
            hits = await loop.run_in_executor(self.pools[name], self._leading_hits, client, hashes)
            if hits:
                self.m.store_blocks.labels(name, "load").inc(hits)
            best = max(best, hits)
            if best == len(hashes):
                break
        return best

    def backup(self, hashes: list[str], skip: int) -> None:
        for name, client in self.tiers:
            self.pools[name].submit(self._put_all, name, client, hashes[skip:])

    def _put_all(self, name: str, client, hashes: list[str]) -> None:
        for h in hashes:
            try:
                if client.put(self._key(h), self._expected(h)):
                    self.m.store_blocks.labels(name, "backup").inc()
            except (OSError, ConnectionError) as exc:
                log.warning("KV backup to %s failed: %s", name, exc)
                return
