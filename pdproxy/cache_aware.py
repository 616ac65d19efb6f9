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

With engines publishing KV cache events (`--kv-events`, `--tokenizer`: kv_index.py, kv_events.py) an instance
whose publisher is connected is scored by the exact view instead: the leading full blocks of the prompt's tokens
its cache holds over the prompt's full blocks; the others (no events, publisher gone) keep the approximate view,
which is fed on every pick either way. When every candidate has the exact view, "fewest" counts the blocks their
events say they hold.
"""

from __future__ import annotations

from collections import OrderedDict

from .backend_pool import Backend, BackendPool
from .balancer import LeastConnections
from .leg_bodies import prompt_text

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
    uses_prompt = True  # Leg.serve hands this policy the request body (or a prompt's text) instead of the hash key

    def __init__(self, pool: BackendPool, *, cache_threshold: float = 0.3, balance_abs: int = 64,
                 balance_rel: float = 1.5, cache_chars: int = 1 << 22, exact=None):
        self.pool = pool
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.capacity = max(1, cache_chars // CHUNK_CHARS)
        self.stores: dict[str, PrefixStore] = {}
        self.fallback = LeastConnections(pool)
        self.routed = {"cache": 0, "fewest": 0, "balance": 0}  # why each pick was made (tests, bench)
        self.on_routed = None  # with --workers N: told every pick's chunk hashes, for the other workers (learn)
        self.exact = exact  # kv_index.ExactView, or None
        if exact is not None:
            self.routed["kv_events"] = 0  # "cache", decided by the exact view
            exact.sync(pool.backends)

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

    def kv_blocks(self) -> dict[str, int]:
        return self.exact.held_blocks() if self.exact is not None else {}

    def pick(self, key: str | dict | None, exclude, session: str | None = None) -> Backend | None:
        cands = [b for b in self.pool.available() if b not in exclude]
        if not cands:
            return None
        pool = self.pool
        if len(self.stores) > len(pool.backends):
            self.forget_removed()
        body = key if isinstance(key, dict) else None
        text = prompt_text(body) if body is not None else key
        if not text and body is None:
            return self.fallback.pick(None, exclude)
        hashes = chunk_hashes(text)
        loads = [b.inflight for b in cands]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.balance_abs and hi > lo * self.balance_rel:
            chosen, why = cands[loads.index(lo)], "balance"
        else:
            exact = self.exact
            views = None
            if exact is not None and body is not None:
                if len(exact.subs) != len(pool.backends):
                    exact.sync(pool.backends)
                views = [exact.indexes(b.addr) for b in cands]
                if not any(views):
                    views = None
            chosen, why = self._by_cache(cands, hashes, views, body)
        self.routed[why] += 1
        self.store(chosen).insert(hashes)
        if self.on_routed is not None and hashes:
            self.on_routed(chosen.addr, hashes)
        return chosen

    def learn(self, addr: str, hashes: list[int]) -> None:
        """Another worker of this proxy routed a prompt with these chunk hashes to `addr`: every worker keeps the
        same approximate view (chunk hashes agree: the workers share one PYTHONHASHSEED)."""
        if any(b.addr == addr for b in self.pool.backends):
            s = self.stores.get(addr)
            if s is None:
                s = self.stores[addr] = PrefixStore(self.capacity)
            s.insert(hashes)

    def _by_cache(self, cands: list[Backend], hashes: list[int], views, body) -> tuple[Backend, str]:
        """The instance holding the largest share of the prompt if over the threshold, else the one holding the
        fewest. `views`: per candidate its exact view (a list of BlockIndex) or None."""
        blocks = _token_blocks(self.exact.tokens(body)) if views is not None else None
        if blocks is None:
            views = None
        best, best_share, best_exact = None, 0.0, False
        for i, b in enumerate(cands):
            indexes = views[i] if views is not None else None
            if indexes:
                share = max((ix.match(blocks(ix.block_size)) / n if (n := len(blocks(ix.block_size))) else 0.0)
                            for ix in indexes)
            else:
                share = self.store(b).match(hashes) / len(hashes) if hashes else 0.0
            if share > best_share:
                best, best_share, best_exact = b, share, bool(indexes)
        if best is not None and best_share > self.cache_threshold:
            return best, "kv_events" if best_exact else "cache"
        if views is not None and all(views):
            return min(cands, key=lambda b: (sum(len(ix) for ix in self.exact.indexes(b.addr)), b.inflight)), "fewest"
        return min(cands, key=lambda b: (len(self.store(b)), b.inflight)), "fewest"


def _token_blocks(tokens: list[int] | None):
    """block_size -> the hash of each full block's token ids (computed once per size)."""
    if tokens is None:
        return None
    cache: dict[int | None, list[int]] = {}

    def blocks(size: int | None) -> list[int]:
        out = cache.get(size)
        if out is None:
            out = cache[size] = [] if not size else [hash(tuple(tokens[i:i + size]))
                                                     for i in range(0, len(tokens) - size + 1, size)]
        return out
    return blocks
