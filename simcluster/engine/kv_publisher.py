"""One DP rank's KV cache events publisher, as vLLM's ZmqEventPublisher runs it (docs/kv-events.md).

A PUB socket sends each batch as the multipart [topic, 8-byte big-endian sequence number, msgpack payload]; the
last `buffer_steps` batches stay in a buffer that a ROUTER socket replays: a request [identity, "", start seq]
is answered with [identity, "", topic, seq, payload] for each buffered batch from that seq on, then
[identity, "", "", -1 as 8 signed bytes, ""]. vLLM publishes one batch per scheduler step; here the events
of one event-loop turn (the requests an engine step finished prefilling) make one batch.

The `kv-events-gap` fault (simcluster fault) makes the PUB socket drop batches while their sequence numbers are
used up and they stay in the replay buffer, as a PUB socket over its high-water mark drops them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque

import msgspec
import zmq
import zmq.asyncio

from simcluster import profiles
from simcluster.engine.kv_events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EndpointError,
    KVEventBatch,
    KVEventsConfig,
    external_hash,
    is_bind_endpoint,
    local_endpoint,
    offset_endpoint,
)

log = logging.getLogger("simcluster.engine")
END_SEQ = (-1).to_bytes(8, "big", signed=True)
ANY_PORT = "tcp://*:0"  # vLLM binds VLLM_HOST_IP at a port of its choosing (here: the engine's --host)


class PublisherError(Exception):
    """A socket that cannot be set up (the engine stops, exit 1, as vLLM would)."""


class KVEventPublisher:
    def __init__(self, cfg: KVEventsConfig, rank: int, host: str, dropping=lambda: False):
        self.rank = rank
        self.topic = cfg.topic.encode()
        self.dropping = dropping
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=cfg.buffer_steps)
        self.seq = 0
        self.pending: list = []
        self.encoder = msgspec.msgpack.Encoder()
        self.pub = zmq.Context.instance().socket(zmq.PUB)
        self.pub.set_hwm(cfg.hwm)
        self.replay = None
        self._task: asyncio.Task | None = None
        try:
            endpoint = offset_endpoint(cfg.endpoint, rank)
            local = local_endpoint(endpoint, host, "kv events endpoint")
            if is_bind_endpoint(endpoint):
                self.endpoint = _bind(self.pub, local)
            else:
                self.pub.connect(local)
                self.endpoint = local
            replay = None
            if cfg.replay_endpoint:
                self.replay = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
                self.replay.setsockopt(zmq.SNDHWM, 2 * (cfg.buffer_steps + 1))
                replay = offset_endpoint(cfg.replay_endpoint, rank)
                self.replay_endpoint = _bind(self.replay, local_endpoint(replay, host, "kv events replay endpoint"))
            # What vLLM reports at GET /kv_event_sources: the endpoints as configured (offset by the rank), except
            # that tcp://*:0 is reported as the address and port it bound.
            self.source = {**dataclasses.asdict(cfg),
                           "endpoint": self.endpoint if endpoint == ANY_PORT else endpoint,
                           "replay_endpoint": self.replay_endpoint if replay == ANY_PORT else replay}
        except (zmq.ZMQError, EndpointError) as exc:
            self.close()
            raise PublisherError(str(exc) if isinstance(exc, EndpointError) else
                                 f"zmq.error.ZMQError: {exc} (kv events, DP rank {rank})") from None
        log.info("KV cache events of DP rank %d: %s %s, replay %s, topic %r", rank,
                 "bound" if is_bind_endpoint(endpoint) else "connected to", self.endpoint,
                 self.replay_endpoint if self.replay is not None else None, cfg.topic)

    def start(self) -> None:
        if self.replay is not None:
            self._task = asyncio.get_running_loop().create_task(self._serve_replay())

    # -- what the prefix cache reports (engine/prefix.py) --
    def stored(self, hashes: list[str], parent: str | None, tokens: list[int]) -> None:
        self._add(BlockStored(
            block_hashes=[external_hash(h) for h in hashes],
            parent_block_hash=external_hash(parent) if parent else None, token_ids=list(tokens),
            block_size=profiles.BLOCK_SIZE, lora_id=None, medium=MEDIUM_GPU, lora_name=None,
            extra_keys=[None] * len(hashes), group_idx=0, kv_cache_spec_kind="full_attention"))

    def removed(self, block_hash: str) -> None:
        self._add(BlockRemoved(block_hashes=[external_hash(block_hash)], medium=MEDIUM_GPU, group_idx=0))

    def cleared(self) -> None:
        self._add(AllBlocksCleared())

    def _add(self, event) -> None:
        self.pending.append(event)
        if len(self.pending) == 1:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        events, self.pending = self.pending, []
        if not events:
            return
        payload = self.encoder.encode(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=self.rank))
        seq, self.seq = self.seq, self.seq + 1
        if self.dropping():
            log.warning("kv-events-gap fault: batch %d not sent (kept for replay)", seq)
        else:
            try:
                self.pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # over the high-water mark: dropped, as vLLM's PUB drops it
        self.buffer.append((seq, payload))

    async def _serve_replay(self) -> None:
        while True:
            frames = await self.replay.recv_multipart()
            if len(frames) != 3:
                log.warning("Invalid replay request: %s", frames)
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await self.replay.send_multipart((client, b"", self.topic, seq.to_bytes(8, "big"), payload))
            await self.replay.send_multipart((client, b"", b"", END_SEQ, b""))

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.pub.close(linger=0)
        if self.replay is not None:
            self.replay.close(linger=0)


def _bind(sock, endpoint: str) -> str:
    sock.bind(endpoint)
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)
    return endpoint


def publishers_for(engine) -> list[KVEventPublisher]:
    """One publisher per DP rank (engine core), attached to its prefix cache; none unless configured."""
    cfg = engine.cfg
    if cfg.kv_events is None or not cfg.kv_events.publishes:
        return []
    if not cfg.enable_prefix_caching:
        log.warning("KV cache events are on, but prefix caching is not enabled. Use --enable-prefix-caching to "
                    "enable.")
    out: list[KVEventPublisher] = []
    try:
        for core in engine.cores:
            out.append(KVEventPublisher(cfg.kv_events, core.rank, cfg.host, engine.kv_events_gap))
            if core.prefix is not None:
                core.prefix.events = out[-1]
    except PublisherError:
        for p in out:
            p.close()
        raise
    for p in out:
        p.start()
    return out
