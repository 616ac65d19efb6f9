"""Prefix KV reuse: the local prefix cache of each engine core and the AscendStoreConnector's KV pool.

Local (vLLM's automatic prefix caching, on unless --no-enable-prefix-caching): an LRU of full-block hashes per
engine core, as large as the core's KV capacity; a prompt's leading blocks found there cost nothing.

Pool (AscendStoreConnector, backend mooncake or memcache): after the local cache, the leading blocks the pool
holds are loaded instead of computed (pool_scheduler.get_num_new_matched_tokens: a consumer only with
consumer_is_to_load); after the prefill, the request's full blocks the pool lacks are put there from a worker
thread (a consumer only with consumer_is_to_put), so the response never waits for them. Keys look like
vllm-ascend's PoolKey.to_string() (one key per block: the head_or_tp_rank of an MLA model, 0). A block is loaded
only if its bytes are exactly the bytes its hash implies; a block the pool said it had but could not deliver is a
load error, which kv_load_failure_policy turns into a failed request (fail) or a recompute from that block on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from simcluster.engine import textgen
from simcluster.profiles import BLOCK_SIZE

log = logging.getLogger("simcluster.engine")


class LocalPrefixCache:
    def __init__(self, capacity_blocks: int):
        self.capacity = max(1, capacity_blocks)
        self.blocks: OrderedDict[str, None] = OrderedDict()
        self.events = None  # told what is stored, evicted, cleared: a KVEventPublisher (engine/kv_publisher.py)

    def match(self, hashes: list[str]) -> int:
        hits = 0
        for h in hashes:
            if h not in self.blocks:
                break
            self.blocks.move_to_end(h)
            hits += 1
        return hits

    def clear(self) -> None:
        self.blocks.clear()
        if self.events is not None:
            self.events.cleared()

    def insert(self, hashes: list[str], tokens: list[int] = ()) -> None:
        if self.events is not None:
            self._report_new(hashes, tokens)
        for h in hashes:
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.capacity:
            evicted, _ = self.blocks.popitem(last=False)
            if self.events is not None:
                self.events.removed(evicted)

    def _report_new(self, hashes: list[str], tokens: list[int]) -> None:
        """Each run of blocks not yet held, as vLLM's cache_full_blocks reports it: the run's hashes, the hash of
        the block before it (None for the prompt's first), and the run's tokens."""
        start = None
        for i, h in enumerate([*hashes, None]):
            if h is not None and h not in self.blocks:
                start = i if start is None else start
            elif start is not None:
                self.events.stored(hashes[start:i], hashes[start - 1] if start else None,
                                   tokens[start * BLOCK_SIZE:i * BLOCK_SIZE])
                start = None


class PoolLoadError(Exception):
    def __init__(self, expected: int, loaded: int, backend: str):
        super().__init__(f"KV pool ({backend}) load failed: {expected - loaded} of {expected} blocks the pool "
                         "reported could not be read")
        self.expected = expected
        self.loaded = loaded


class KVPool:
    """One engine's AscendStoreConnector over a backend client with exists/get/put_many (blocking, one thread)."""

    def __init__(self, *, backend: str, client, model: str, block_bytes: int, metrics, loads: bool, puts: bool):
        self.backend = backend
        self.client = client
        self.block_bytes = block_bytes
        self.m = metrics
        self.loads = loads
        self.puts = puts
        name = re.sub(r"\s", "_", model)
        if len(name) > 120:  # memcached keys stop at 250 bytes
            name = hashlib.sha256(name.encode()).hexdigest()[:32]
        self._prefix = f"{name}@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:default@"
        # One worker keeps the non-thread-safe client on one thread; lookups and loads wait behind backups.
        self.pool = ThreadPoolExecutor(1, thread_name_prefix=f"kvpool-{backend}")

    def key(self, block_hash: str) -> str:
        return self._prefix + block_hash

    def expected(self, block_hash: str) -> bytes:
        return textgen.block_bytes(block_hash, self.block_bytes)

    def _leading_existing(self, hashes: list[str]) -> int:
        try:
            found = self.client.exists([self.key(h) for h in hashes])
        except (OSError, ConnectionError) as exc:
            log.warning("KV pool lookup failed: %s", exc)
            return 0
        hits = 0
        for present in found:
            if not present:
                break
            hits += 1
        return hits

    def _load(self, hashes: list[str]) -> int:
        loaded = 0
        for h in hashes:
            try:
                value = self.client.get(self.key(h))
            except (OSError, ConnectionError) as exc:
                log.warning("KV pool load failed: %s", exc)
                break
            if value != self.expected(h):
                break
            loaded += 1
        return loaded

    async def lookup(self, hashes: list[str]) -> int:
        """Leading blocks the pool reports (what the scheduler's lookup sees)."""
        if not hashes:
            return 0
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._leading_existing, hashes)

    async def load(self, hashes: list[str]) -> int:
        """Reads the blocks the lookup reported; raises PoolLoadError if some could not be read."""
        if not hashes:
            return 0
        loaded = await asyncio.get_running_loop().run_in_executor(self.pool, self._load, hashes)
        if loaded:
            self.m.store_blocks.labels(self.backend, "load").inc(loaded)
        if loaded < len(hashes):
            raise PoolLoadError(len(hashes), loaded, self.backend)
        return loaded

    def backup(self, hashes: list[str]) -> None:
        if hashes:
            self.pool.submit(self._put_missing, hashes)

    def _put_missing(self, hashes: list[str]) -> None:
        try:
            present = self.client.exists([self.key(h) for h in hashes])
        except (OSError, ConnectionError) as exc:
            log.warning("KV pool backup failed: %s", exc)
            return
        missing = [h for h, there in zip(hashes, present, strict=False) if not there]
        try:
            stored = self.client.put_many([(self.key(h), self.expected(h)) for h in missing])
        except (OSError, ConnectionError) as exc:
            log.warning("KV pool backup failed: %s", exc)
            return
        if sum(stored):
            self.m.store_blocks.labels(self.backend, "backup").inc(sum(stored))
        if not all(stored):
            log.warning("KV pool backup: %d of %d blocks not stored", len(stored) - sum(stored), len(stored))

    async def drain(self) -> None:
        """Wait for the backups queued so far."""
        await asyncio.get_running_loop().run_in_executor(self.pool, lambda: None)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        try:
            self.client.close()
        except OSError:
            pass


class MemcacheClient:
    """exists/get/put over AscendStore (the memcached ring that stands in for MemCache's pool)."""

    def __init__(self, servers: list[str], replicas: int):
        from simcluster.ascendstore import AscendStore

        self.store = AscendStore(servers, replicas=replicas)

    def exists(self, keys: list[str]) -> list[bool]:
        return [self.store.get(k) is not None for k in keys]

    def get(self, key: str) -> bytes | None:
        return self.store.get(key)

    def put_many(self, items: list[tuple[str, bytes]]) -> list[bool]:
        return [self.store.put(key, value) > 0 for key, value in items]

    def close(self) -> None:
        self.store.close()
