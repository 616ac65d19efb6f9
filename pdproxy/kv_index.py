"""cache_aware's exact view: what each instance's prefix cache holds, from its KV cache events (kv_events.py).

Per publisher (one DP rank of one instance) a BlockIndex of the blocks its BlockStored events announced and no
BlockRemoved / AllBlocksCleared took back, keyed by (parent block hash, the block's token ids): a prompt's token
blocks are walked from the first (parent None) without knowing the engine's hash function. The token tuple is kept
as its 64-bit hash (a false match needs a hash collision). Blocks stored under a LoRA, with extra hash keys
(cache_salt, multimodal inputs), in another KV cache group than 0 or on another medium than the GPU's (an
offloading tier) are not indexed: a plain prompt cannot reach them. An instance's share of a prompt is the
leading full blocks its best live DP rank holds over the prompt's full blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class BlockIndex:
    __slots__ = ("blocks", "keys", "block_size")

    def __init__(self):
        self.blocks: dict[int, object] = {}  # hash((parent hash, hash(token ids))) -> block hash
        self.keys: dict[object, int] = {}  # block hash -> its key in blocks
        self.block_size: int | None = None

    def __len__(self) -> int:
        return len(self.blocks)

    def clear(self) -> None:
        self.blocks.clear()
        self.keys.clear()

    def stored(self, ev) -> None:
        if (ev.lora_id is not None or ev.lora_name is not None or (ev.group_idx or 0) != 0
                or ev.medium not in (None, "GPU") or (ev.extra_keys and any(k is not None for k in ev.extra_keys))):
            return
        bs = ev.block_size
        if bs != self.block_size:
            self.clear()
            self.block_size = bs
        tokens, parent, blocks, keys = ev.token_ids, ev.parent_block_hash, self.blocks, self.keys
        for i, h in enumerate(ev.block_hashes):
            key = hash((parent, hash(tuple(tokens[i * bs:(i + 1) * bs]))))
            blocks[key] = h
            keys[h] = key
            parent = h

    def removed(self, ev) -> None:
        for h in ev.block_hashes:
            key = self.keys.pop(h, None)
            if key is not None and self.blocks.get(key) == h:
                del self.blocks[key]

    def match(self, block_keys: list[int]) -> int:
        """How many leading blocks of a prompt (each given as the hash of its token ids) this index holds."""
        blocks, parent, n = self.blocks, None, 0
        for k in block_keys:
            parent = blocks.get(hash((parent, k)))
            if parent is None:
                break
            n += 1
        return n


@dataclass(frozen=True)
class Endpoint:
    pub: str
    replay: str | None = None


_SPEC = re.compile(r"^(?:(?P<addr>[^=\s]+:\d+)=)?(?P<endpoints>\S+)$")
DISCOVER = "discover"  # ask the instance where it publishes: its GET /kv_event_sources (kv_sources.py)


def parse_specs(specs: list[str]) -> tuple[dict[str, list[Endpoint] | str], list[Endpoint] | str | None]:
    """`--kv-events` entries: `HOST:PORT=ENDPOINTS` for one instance, or `ENDPOINTS` with {host} and {port} (the
    instance's API host and port) for every other one. ENDPOINTS: one `tcp://H:P` per DP rank the instance runs,
    comma-separated, each optionally `|tcp://H:R` naming its replay endpoint; or `discover`: the endpoints the
    instance reports at GET /kv_event_sources. ValueError names a bad entry."""
    explicit: dict[str, list[Endpoint] | str] = {}
    template = None
    for spec in specs:
        m = _SPEC.match(spec.strip())
        if not m:
            raise ValueError(f"kv_events: not HOST:PORT=ENDPOINT nor an endpoint template: {spec!r}")
        if m["endpoints"] == DISCOVER:
            if m["addr"]:
                explicit[m["addr"]] = DISCOVER
            elif template is not None:
                raise ValueError("kv_events: give one endpoint template at most")
            else:
                template = DISCOVER
            continue
        endpoints = []
        for part in m["endpoints"].split(","):
            pub, _, replay = part.partition("|")
            for ep in (pub, replay):
                if ep and not ep.startswith(("tcp://", "ipc://")):
                    raise ValueError(f"kv_events: {ep!r} is not a tcp:// or ipc:// endpoint (in {spec!r})")
                if "*" in ep:
                    raise ValueError(f"kv_events: {ep!r}: name the engine's address, not a wildcard (in {spec!r})")
            endpoints.append(Endpoint(pub, replay or None))
        if m["addr"]:
            explicit[m["addr"]] = endpoints
        elif template is not None:
            raise ValueError("kv_events: give one endpoint template at most")
        elif "{host}" not in spec and "{port}" not in spec:
            raise ValueError(f"kv_events: the template {spec!r} names neither {{host}} nor {{port}}: every instance "
                             "would get the same publisher (give HOST:PORT=ENDPOINT per instance)")
        else:
            template = endpoints
    return explicit, template


class ExactView:
    """One role's instances: their subscribers (kv_events.Subscriber), started and stopped with the pool."""

    def __init__(self, specs: list[str], topic: str, tokens):
        self.explicit, self.template = parse_specs(specs)
        self.topic = topic
        self.tokens = tokens  # PromptTokens (prompt_tokens.py)
        self.subs: dict[str, list] = {}
        self.finders: dict[str, object] = {}  # addr -> kv_sources.SourceFinder, for `discover` instances

    def endpoints(self, addr: str) -> list[Endpoint] | str:
        if addr in self.explicit:
            return self.explicit[addr]
        if self.template is None or self.template == DISCOVER:
            return self.template or []
        host, _, port = addr.rpartition(":")
        return [Endpoint(e.pub.format(host=host, port=port), e.replay.format(host=host, port=port) if e.replay
                         else None) for e in self.template]

    def sync(self, backends) -> None:
        from .kv_events import Subscriber
        from .kv_sources import SourceFinder

        live = {b.addr: b for b in backends}
        for addr in live.keys() - self.subs.keys():
            endpoints = self.endpoints(addr)
            if endpoints == DISCOVER:  # subscribed once the instance says where it publishes
                self.subs[addr] = []
                self.finders[addr] = finder = SourceFinder(self, live[addr])
                finder.start()
                continue
            self.subs[addr] = [Subscriber(e.pub, e.replay, self.topic, f"{addr} rank {r}")
                               for r, e in enumerate(endpoints)]
            for s in self.subs[addr]:
                s.start()
        for addr in self.subs.keys() - live.keys():
            finder = self.finders.pop(addr, None)
            if finder is not None:
                finder.stop()
            for s in self.subs.pop(addr):
                s.stop()

    def indexes(self, addr: str) -> list[BlockIndex] | None:
        """The indexes of the instance's connected publishers, or None when none is (use the approximate view)."""
        subs = self.subs.get(addr)
        if not subs:
            return None
        out = [s.index for s in subs if s.live]
        return out or None

    def held_blocks(self) -> dict[str, int]:
        return {addr: sum(len(s.index) for s in subs if s.live) for addr, subs in self.subs.items()
                if any(s.live for s in subs)}

    def close(self) -> None:
        for finder in self.finders.values():
            finder.stop()
        self.finders.clear()
        for subs in self.subs.values():
            for s in subs:
                s.stop()
        self.subs.clear()


def exact_view(cfg) -> ExactView | None:
    """The exact view of one role's instances when --kv-events is given (subscribers start on the running loop)."""
    if not cfg.kv_events:
        return None
    from .prompt_tokens import PromptTokens

    return ExactView(cfg.kv_events, cfg.kv_events_topic, PromptTokens(cfg.tokenizer))
