"""The P->D KV hand-over over TCP: P serves held KV on its kv_port window, D pulls and verifies it.

Stands in for Mooncake's ZMQ side channel + transfer engine (docs/ascend-pd-launch-facts.md §1.5). Wire format,
one connection per pull:
  D -> P  {"op": "pull", "request_id": R, "block_ids": [...], "peer": "<D api host:port>"}\\n
  P -> D  {"ok": true, "size": N, "sha256": H, "peer": "<P api host:port>"}\\n  then N raw bytes
  D -> P  {"op": "done", "request_id": R}\\n          (P frees the KV: "DONE_RECVING")
  P -> D  {"ok": true}\\n
D checks the byte count and the SHA-256 before it decodes a single token.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field


@dataclass
class HeldKV:
    data: bytes
    sha256: str
    block_ids: list[int]
    tokens: int
    created: float = field(default_factory=time.monotonic)


class KVTransferError(RuntimeError):
    pass


class KVServer:
    """Owns the KV a Prefill holds for remote decoders; frees it once pulled or after the abort timeout."""

    def __init__(self, api_endpoint: str, metrics, kv_scale: int, abort_timeout_s: float, corrupt=lambda: False):
        self.api_endpoint = api_endpoint
        self.metrics = metrics
        self.kv_scale = kv_scale
        self.abort_timeout_s = abort_timeout_s
        self.corrupt = corrupt  # fault switch: flip one byte on the wire
        self.held: dict[str, HeldKV] = {}
        self.servers: list[asyncio.base_events.Server] = []

    async def start(self, host: str, ports: list[int]) -> None:
        for port in ports:
            self.servers.append(await asyncio.start_server(self._handle, host, port))

    def hold(self, request_id: str, kv: HeldKV) -> None:
        self.held[request_id] = kv
        self._update_gauges()

    def free(self, request_id: str, reason: str) -> None:
        if self.held.pop(request_id, None) is not None:
            self.metrics.kv_freed.labels(reason).inc()
            self._update_gauges()

    def expire(self) -> None:
        now = time.monotonic()
        for rid in [r for r, kv in self.held.items() if now - kv.created > self.abort_timeout_s]:
            self.free(rid, "timeout")

    def _update_gauges(self) -> None:
        self.metrics.kv_held_requests.set(len(self.held))
        self.metrics.kv_held_bytes.set(sum(len(kv.data) for kv in self.held.values()))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                if msg.get("op") == "pull":
                    await self._send(msg, writer)
                elif msg.get("op") == "done":
                    self.free(msg["request_id"], "pulled")
                    writer.write(b'{"ok": true}\n')
                    await writer.drain()
        except (ConnectionError, json.JSONDecodeError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _send(self, msg: dict, writer: asyncio.StreamWriter) -> None:
        kv = self.held.get(msg.get("request_id", ""))
        peer = str(msg.get("peer", "unknown"))
        if kv is None:
            writer.write(json.dumps({"ok": False, "error": "unknown or expired request"}).encode() + b"\n")
            self.metrics.kv_transfers.labels(peer, "send", "error").inc()
            await writer.drain()
            return
        data = kv.data
        if self.corrupt():
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        header = {"ok": True, "size": len(data), "sha256": kv.sha256, "peer": self.api_endpoint}
        writer.write(json.dumps(header).encode() + b"\n")
        writer.write(data)
        await writer.drain()
        self.metrics.kv_bytes.labels(peer, "send").inc(len(data))
        self.metrics.kv_model_bytes.labels(peer, "send").inc(len(data) * self.kv_scale)
        self.metrics.kv_transfers.labels(peer, "send", "ok").inc()

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for server in self.servers:
            await server.wait_closed()


async def open_side_channel(params: dict, local_host: str, metrics, direction: str, timeout: float, what: str):
    """A connection to the peer's KV side channel that kv_transfer_params name: (reader, writer, "host:port")."""
    host, port = params["remote_host"], int(params["remote_port"])
    peer = f"{host}:{port}"
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(local_host, 0)), timeout)
    except (TimeoutError, OSError) as exc:
        metrics.kv_transfers.labels(peer, direction, "error").inc()
        raise KVTransferError(f"cannot reach {what} {peer}: {exc}") from exc
    return reader, writer, peer


async def pull_kv(*, params: dict, local_host: str, api_endpoint: str, expected_size: int, metrics,
                  kv_scale: int, timeout: float = 30.0) -> bytes:
    """D side: fetch the KV named by P's kv_transfer_params, verify it, then tell P to free it."""
    reader, writer, peer = await open_side_channel(params, local_host, metrics, "recv", timeout,
                                                   "KV side channel")
    try:
        rid = params["remote_request_id"]
        writer.write(json.dumps({"op": "pull", "request_id": rid, "block_ids": params.get("remote_block_ids"),
                                 "peer": api_endpoint}).encode() + b"\n")
        header = json.loads(await asyncio.wait_for(reader.readline(), timeout) or b"{}")
        peer = header.get("peer", peer)
        if not header.get("ok"):
            metrics.kv_transfers.labels(peer, "recv", "error").inc()
            raise KVTransferError(f"prefill {peer} refused the pull: {header.get('error', 'no answer')}")
        data = await asyncio.wait_for(reader.readexactly(header["size"]), timeout)
        metrics.kv_bytes.labels(peer, "recv").inc(len(data))
        metrics.kv_model_bytes.labels(peer, "recv").inc(len(data) * kv_scale)
        if len(data) != expected_size or hashlib.sha256(data).hexdigest() != header["sha256"]:
            metrics.kv_transfers.labels(peer, "recv", "checksum_error").inc()
            raise KVTransferError(f"KV from {peer} failed verification ({len(data)} bytes, expected "
                                  f"{expected_size}; checksum mismatch)")
        writer.write(json.dumps({"op": "done", "request_id": rid}).encode() + b"\n")
        await writer.drain()
        await asyncio.wait_for(reader.readline(), timeout)
        metrics.kv_transfers.labels(peer, "recv", "ok").inc()
        return data
    except (TimeoutError, OSError, asyncio.IncompleteReadError, json.JSONDecodeError) as exc:
        metrics.kv_transfers.labels(peer, "recv", "error").inc()
        raise KVTransferError(f"KV transfer from {peer} broke: {exc!r}") from exc
    finally:
        writer.close()
