"""Cache-aware routing (`--policy cache_aware`, for the Prefill role above all): a request goes to the instance
most likely to hold its prompt's prefix in its prefix cache, unless load is out of balance.

The same rule as SGLang's router (sgl-model-gateway, policy `cache_aware`, the same defaults):
- load out of balance, max - min in-flight > --balance-abs-threshold and max > min x --balance-rel-threshold:
  the least loaded instance;
- else the instance whose routed prefixes match the longest leading part of this prompt, when that part is over
  --cache-threshold of the prompt; else the instance holding the fewest routed prefixes (the most free cache).
The chosen instance then holds the prompt's prefix.

What an instance holds is approximated per instance (SGLang keeps one radix tree with a tenant set per node): the
prompt's text is cut into CHUNK_CHARS-character chunks and each chunk is known by the hash of everything before
it and itself, so an instance's set of chunk hashes is a prefix tree of what was routed there; matching walks the
prompt's hashes until the first one the instance lacks. Each instance keeps at most --cache-chars characters'
worth, least recently used chunk first out, as the engine's own cache would.
"""

from __future__ import annotations

from collections import OrderedDict

from .backend_pool import Backend, BackendPool
from .balancer import LeastConnections

CHUNK_CHARS = 64  # about 16 tokens; vLLM caches 128-token blocks, so a chunk never spans much of two
MAX_PROMPT_CHARS = 1 << 17  # what is looked at of a prompt (about 32K tokens)


def chunk_hashes(text: str) -> list[int]:
    """The hash of each leading CHUNK_CHARS-character chunk, chained: equal hashes mean equal prefixes."""
    out = []
    h = 0
    for i in range(0, min(len(text), MAX_PROMPT_CHARS) - CHUNK_CHARS + 1, CHUNK_CHARS):
        h = hash((h, text[i:i + CHUNK_CHARS]))
        out.append(h)
    return out


class PrefixStore:
    """One instance's routed prefixes: chunk hashes in least-recently-used order, bounded."""

    __slots__ = ("chunks", "capacity")

    def __init__(self, capacity_chunks: int):
        self.chunks: OrderedDict[int, None] = OrderedDict()
        self.capacity = max(1, capacity_chunks)

    def match(self, hashes: list[int]) -> int:
        """How many leading chunks of the prompt this instance holds."""
        chunks = self.chunks
        n = 0
        for h in hashes:
            if h not in chunks:
                break
            n += 1
        return n

    def insert(self, hashes: list[int]) -> None:
        chunks = self.chunks
        for h in hashes:
            chunks[h] = None
            chunks.move_to_end(h)
        while len(chunks) > self.capacity:
            chunks.popitem(last=False)

    def __len__(self) -> int:
        return len(self.chunks)


class CacheAware:
    uses_prompt = True  # Leg.serve hands this policy the prompt's text instead of the hash key

    def __init__(self, pool: BackendPool, *, cache_threshold: float = 0.3, balance_abs: int = 64,
                 balance_rel: float = 1.5, cache_chars: int = 1 << 22):
        self.pool = pool
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.capacity = max(1, cache_chars // CHUNK_CHARS)
        self.stores: dict[str, PrefixStore] = {}
        self.fallback = LeastConnections(pool)
        self.routed = {"cache": 0, "fewest": 0, "balance": 0}  # why each pick was made (tests, bench)

    def store(self, b: Backend) -> PrefixStore:
        s = self.stores.get(b.addr)
        if s is None:
            s = self.stores[b.addr] = PrefixStore(self.capacity)
        return s

    def forget_removed(self) -> None:
        live = {b.addr for b in self.pool.backends}
        for addr in [a for a in self.stores if a not in live]:
            del self.stores[addr]

    def held_chars(self) -> dict[str, int]:
        return {addr: len(s) * CHUNK_CHARS for addr, s in self.stores.items()}

    def pick(self, key: str | None, exclude, session: str | None = None) -> Backend | None:
        cands = [b for b in self.pool.available() if b not in exclude]
        if not cands:
            return None
        if len(self.stores) > len(self.pool.backends):
            self.forget_removed()
        if not key:
            return self.fallback.pick(None, exclude)
        hashes = chunk_hashes(key)
        loads = [b.inflight for b in cands]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.balance_abs and hi > lo * self.balance_rel:
            chosen, why = cands[loads.index(lo)], "balance"
        else:
            best, best_n = None, 0
            for b in cands:
                n = self.store(b).match(hashes)
                if n > best_n:
                    best, best_n = b, n
            if best is not None and hashes and best_n / len(hashes) > self.cache_threshold:
                chosen, why = best, "cache"
            else:
                chosen = min(cands, key=lambda b: (len(self.store(b)), b.inflight))
                why = "fewest"
        self.routed[why] += 1
        self.store(chosen).insert(hashes)
        return chosen
