"""A subscriber to one engine publisher's KV cache events (vLLM's `--kv-events-config`), on the proxy's loop.

The wire (docs/kv-events.md): PUB multipart [topic, 8-byte big-endian sequence number, msgpack KVEventBatch];
the batch is an array [ts, [events], data_parallel_rank], each event a map tagged "type" (vLLM >= PR 42892) or,
from older releases, an array tagged by its first element: both are read. The replay ROUTER answers
[start seq] with one [topic, seq, payload] per buffered batch (older releases: [seq, payload]), then an end
marker (seq -1, empty payload).

Keeping the view whole (the subscriber's BlockIndex, kv_index.py):
- connected (ZMQ monitor: handshake done): the view starts afresh: cleared, then replayed from sequence 0 when a
  replay endpoint is known (the publisher's buffer: vLLM keeps 10,000 batches), so a proxy that starts late, or an
  engine that restarted, is seen whole;
- a sequence gap (batches the PUB socket dropped: over its high-water mark, or while disconnected): replay from
  the first missing one; when there is no replay endpoint, it does not answer within REPLAY_TIMEOUT_S, or its
  buffer no longer reaches back that far, the view is cleared (resync) and rebuilt from what comes next: an
  instance is then credited with less than it holds, never with what it lost;
- disconnected: the view is not used (cache_aware falls back to its approximate view for that instance) until the
  next connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from .kv_index import BlockIndex

log = logging.getLogger("pdproxy.kv_events")
END_SEQ = (-1).to_bytes(8, "big", signed=True)
REPLAY_TIMEOUT_S = 2.0


class _Event(msgspec.Struct, tag=True):
    pass


class BlockStored(_Event):
    block_hashes: list[int | bytes]
    token_ids: list[int]
    parent_block_hash: int | bytes | None = None
    block_size: int = 16
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None


class BlockRemoved(_Event):
    block_hashes: list[int | bytes]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(_Event):
    pass


class Batch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


class _Legacy(msgspec.Struct, tag=True, array_like=True):
    pass


class LegacyBlockStored(_Legacy, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class LegacyBlockRemoved(_Legacy, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None = None
    group_idx: int | None = None


class LegacyAllBlocksCleared(_Legacy, tag="AllBlocksCleared"):
    pass


class LegacyBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[LegacyBlockStored | LegacyBlockRemoved | LegacyAllBlocksCleared]
    data_parallel_rank: int | None = None


_DECODE = msgspec.msgpack.Decoder(Batch).decode
_DECODE_LEGACY = msgspec.msgpack.Decoder(LegacyBatch).decode


def decode(payload: bytes):
    try:
        return _DECODE(payload)
    except msgspec.ValidationError:
        return _DECODE_LEGACY(payload)


class Subscriber:
    def __init__(self, endpoint: str, replay: str | None, topic: str, name: str):
        self.endpoint, self.replay_endpoint, self.topic, self.name = endpoint, replay, topic.encode(), name
        self.index = BlockIndex()
        self.live = False
        self.last: int | None = None  # sequence number of the last batch applied
        self.stats = {"batches": 0, "replayed": 0, "resyncs": 0, "undecodable": 0}
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._sockets: list = []
        self._dealer = None

    def start(self) -> None:
        ctx = zmq.asyncio.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, self.topic)
        monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.endpoint)
        self._sockets = [sub, monitor]
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._watch(monitor)), loop.create_task(self._receive(sub))]

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for s in [*self._sockets, self._dealer]:
            if s is not None:
                s.close(linger=0)
        self._sockets, self._dealer, self.live = [], None, False

    async def _watch(self, monitor) -> None:
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                async with self._lock:
                    log.info("kv events %s: connected to %s", self.name, self.endpoint)
                    self.index.clear()
                    self.last = None
                    self.live = True
                    if self.replay_endpoint:
                        await self._catch_up(None)
            elif event == zmq.EVENT_DISCONNECTED:
                log.warning("kv events %s: %s disconnected; its approximate view is used until it is back",
                            self.name, self.endpoint)
                self.live = False

    async def _receive(self, sub) -> None:
        while True:
            topic, seq_bytes, payload = (await sub.recv_multipart())[-3:]
            seq = int.from_bytes(seq_bytes, "big")
            async with self._lock:
                if self.last is None and self.replay_endpoint or self.last is not None and seq > self.last + 1:
                    await self._catch_up(seq)
                if self.last is None or seq > self.last:
                    self._apply(seq, payload)

    async def _catch_up(self, upto: int | None) -> None:
        """Batches from self.last + 1 (0 when nothing is applied) to `upto` (not included; None: all there are)
        from the replay endpoint; or, if they cannot all be had, a cleared view."""
        start = 0 if self.last is None else self.last + 1
        got = await self._replay(start) if self.replay_endpoint else None
        whole = got is not None and (upto == start or (got and got[0][0] == start) or (upto is None and not got))
        if not whole:
            if self.last is not None or len(self.index):
                self.stats["resyncs"] += 1
                log.warning("kv events %s: batches %d..%s missing and not replayable: view cleared", self.name,
                            start, "" if upto is None else upto - 1)
            self.index.clear()
        for seq, payload in got or ():
            if (upto is None or seq < upto) and (self.last is None or seq > self.last):
                self._apply(seq, payload)
                self.stats["replayed"] += 1
        if not whole and upto is not None:
            self.last = upto - 1

    async def _replay(self, start: int) -> list[tuple[int, bytes]] | None:
        if self._dealer is None:
            self._dealer = zmq.asyncio.Context.instance().socket(zmq.DEALER)
            self._dealer.setsockopt(zmq.LINGER, 0)
            self._dealer.connect(self.replay_endpoint)
        dealer, out = self._dealer, []
        await dealer.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            if not await dealer.poll(REPLAY_TIMEOUT_S * 1000):
                log.warning("kv events %s: replay endpoint %s did not answer", self.name, self.replay_endpoint)
                dealer.close(linger=0)  # a late answer must not be read as the next one's
                self._dealer = None
                return None
            frames = await dealer.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            if len(frames) < 2 or frames[-2] == END_SEQ or not frames[-1]:
                return out
            out.append((int.from_bytes(frames[-2], "big"), frames[-1]))

    def _apply(self, seq: int, payload: bytes) -> None:
        self.last = seq
        try:
            batch = decode(payload)
        except msgspec.DecodeError as exc:
            self.stats["undecodable"] += 1
            log.warning("kv events %s: batch %d not decodable (%s): view cleared", self.name, seq, exc)
            self.index.clear()
            return
        self.stats["batches"] += 1
        index = self.index
        for ev in batch.events:
            kind = type(ev).__name__
            if kind.endswith("BlockStored"):
                index.stored(ev)
            elif kind.endswith("BlockRemoved"):
                index.removed(ev)
            else:
                index.clear()
