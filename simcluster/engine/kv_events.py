"""`--kv-events-config` as vLLM reads it, and the KV cache events on the wire (docs/kv-events.md).

The config is vLLM's KVEventsConfig (vllm/config/kv_events.py): a pydantic dataclass that forbids unknown keys;
`publisher` defaults to "zmq" when `enable_kv_cache_events` is on, else "null". The structs below are vLLM 0.34's
(vllm/distributed/kv_events.py): the batch is a msgspec array (`[ts, [events], data_parallel_rank]`), each event a
map tagged by its class name under "type" (vLLM >= PR 42892; older releases sent events as arrays too).

Endpoints as ZmqEventPublisher treats them: the port moves up by the DP rank (offset_endpoint_port; port 0 stays);
a wildcard (`*`, `::`), ipc:// or inproc:// endpoint is bound, any other one is connected to (the subscriber binds
there). Here a wildcard binds the engine's own --host instead (logged): the simulator never binds every interface,
and it binds or connects only on 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from dataclasses import dataclass
from typing import Any

import msgspec

log = logging.getLogger("simcluster.engine")

MEDIUM_GPU = "GPU"  # what vLLM's BlockPool reports (vllm-ascend keeps the default)


@dataclass(frozen=True)
class KVEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000  # vLLM's queue to its publisher thread; the simulator publishes inline
    topic: str = ""

    @property
    def publishes(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


_TYPES = {"enable_kv_cache_events": bool, "publisher": (str, type(None)), "endpoint": str,
          "replay_endpoint": (str, type(None)), "buffer_steps": int, "hwm": int, "max_queue_size": int, "topic": str}


def parse_config(text: str) -> KVEventsConfig:
    """The argparse type of --kv-events-config; ValueError names what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"1 validation error for KVEventsConfig: Invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("1 validation error for KVEventsConfig: Input should be an object")
    errors = [f"{key}: Extra inputs are not permitted" for key in data if key not in _TYPES]
    for key, value in data.items():
        kind = _TYPES.get(key)
        if kind and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            errors.append(f"{key}: Input should be a valid {getattr(kind, '__name__', 'string')}, got {value!r}")
    if data.get("publisher") not in (None, "null", "zmq"):
        errors.append(f"publisher: Input should be 'null' or 'zmq', got {data['publisher']!r}")
    if errors:
        raise ValueError(f"{len(errors)} validation error(s) for KVEventsConfig: " + "; ".join(errors))
    cfg = KVEventsConfig(**data)
    if cfg.publisher is None:
        cfg = KVEventsConfig(**{**data, "publisher": "zmq" if cfg.enable_kv_cache_events else "null"})
    return cfg


class EndpointError(Exception):
    """An endpoint the simulator will not bind or connect (the engine stops, exit 1)."""


def offset_endpoint(endpoint: str | None, rank: int) -> str | None:
    """vLLM's ZmqEventPublisher.offset_endpoint_port."""
    if not endpoint or rank == 0:
        return endpoint
    if "inproc" in endpoint:
        return f"{endpoint}_dp{rank}"
    if "tcp" in endpoint:
        base, _, port = endpoint.rpartition(":")
        return endpoint if int(port) == 0 else f"{base}:{int(port) + rank}"
    raise EndpointError("ValueError: Invalid endpoint: must contain 'inproc' or 'tcp'")


def is_bind_endpoint(endpoint: str) -> bool:
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return host == "localhost"


def local_endpoint(endpoint: str, host: str, what: str) -> str:
    """The endpoint the simulator really uses: a wildcard host becomes the engine's --host; a TCP host must be
    on 127.0.0.0/8."""
    if not endpoint.startswith("tcp://"):
        return endpoint
    address, _, port = endpoint[6:].rpartition(":")
    if address in ("*", "::", "[::]", "0.0.0.0"):
        chosen = f"tcp://{host}:{port}"
        log.warning("%s %s would bind every interface: binding %s (the engine's --host) instead", what, endpoint,
                     chosen)
        return chosen
    if not _loopback(address):
        raise EndpointError(f"simcluster: {what} {endpoint}: the simulator binds and connects only on 127.0.0.0/8")
    return endpoint


# -- the wire: vLLM 0.34's structs ------------------------------------------------------------------------------

class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base class of the events (tagged maps)."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


def external_hash(block_hash: str) -> int:
    """A block hash as vLLM publishes it with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (the default): the low 64 bits
    of the hash's bytes, big-endian. The simulator's hashes are 32 hex digits."""
    return int(block_hash, 16) & ((1 << 64) - 1)
