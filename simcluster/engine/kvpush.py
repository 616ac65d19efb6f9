"""MooncakeLayerwiseConnector's P->D hand-over over TCP: the Decode listens on its kv_port window, the Prefill
pushes into it layer by layer.

Stands in for the layerwise connector's ZMQ side channel and its transfer-engine writes
(docs/ascend-pd-launch-facts.md §2.6): the Decode binds kv_port + dp_rank*TP + tp_rank (KVCacheRecvingLayerThread),
the Prefill binds nothing and connects there. One connection per push:
  P -> D  {"op": "get_meta", "peer": "<P api host:port>"}\\n
  D -> P  {"ok": true, "engine_id": E, "peer": "<D api host:port>"}\\n       (GET_META_MSG: the Decode's metadata)
  P -> D  {"op": "layer", "request_id": R, "layer": i, "size": n}\\n + n bytes    (one write per layer)
  P -> D  {"op": "done", "request_id": R, "ok": true, "sha256": H}\\n      (DONE_SENDING_MSG; with "ok": false and
  D -> P  {"ok": true}\\n                                                    "error": FAILED_SENDING_MSG), ACK
The Decode checks the byte count and the SHA-256 of all the layers before its request decodes a token.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging

from simcluster.engine.kvwire import KVTransferError, open_side_channel

log = logging.getLogger("simcluster.engine")
FAILED_NOTICE_TIMEOUT_S = 1.0  # the real connector's ACK wait (self.timeout)


def _line(msg: dict) -> bytes:
    return json.dumps(msg).encode() + b"\n"


class KVReceiver:
    """The Decode's side channel: requests waiting for a push, and the pushes that arrive for them."""

    def __init__(self, api_endpoint: str, metrics, kv_scale: int):
        self.api_endpoint = api_endpoint
        self.metrics = metrics
        self.kv_scale = kv_scale
        self.waiting: dict[str, tuple[int, asyncio.Future]] = {}  # request id -> (expected bytes, outcome)
        self.servers: list[asyncio.base_events.Server] = []

    async def start(self, host: str, engine_ids: dict[int, str]) -> None:
        """Bind each side-channel port (port -> the engine id of the DP rank it belongs to)."""
        for port, engine_id in engine_ids.items():
            self.servers.append(await asyncio.start_server(functools.partial(self._handle, engine_id), host, port))

    def expect(self, request_id: str, size: int) -> asyncio.Future:
        """A future that resolves to the bytes received once a verified push for `request_id` is done."""
        fut = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = (size, fut)
        return fut

    def forget(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)

    async def _handle(self, engine_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = "unknown"
        layers: dict[str, list[bytes]] = {}  # what this connection pushed, per request
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                op = msg.get("op")
                if op == "get_meta":
                    peer = str(msg.get("peer", peer))
                    writer.write(_line({"ok": True, "engine_id": engine_id, "peer": self.api_endpoint}))
                elif op == "layer":
                    data = await reader.readexactly(int(msg["size"]))
                    layers.setdefault(str(msg.get("request_id")), []).append(data)
                    continue
                elif op == "done":
                    rid = str(msg.get("request_id"))
                    self._finish(rid, msg, b"".join(layers.pop(rid, [])), peer)
                    writer.write(_line({"ok": True}))
                await writer.drain()
        except (ConnectionError, json.JSONDecodeError, asyncio.IncompleteReadError, KeyError, ValueError):
            pass  # a push that broke off: its layers are dropped, the request keeps waiting
        finally:
            writer.close()

    def _finish(self, rid: str, msg: dict, data: bytes, peer: str) -> None:
        m = self.metrics
        if data:
            m.kv_bytes.labels(peer, "recv").inc(len(data))
            m.kv_model_bytes.labels(peer, "recv").inc(len(data) * self.kv_scale)
        size, fut = self.waiting.get(rid, (0, None))
        if fut is None or fut.done():
            log.warning("KV pushed by %s for %s, which no request waits for (finished, failed or timed out)", peer,
                        rid)
            m.kv_transfers.labels(peer, "recv", "error").inc()
            return
        if not msg.get("ok"):
            m.kv_transfers.labels(peer, "recv", "error").inc()
            fut.set_exception(KVTransferError(f"prefill {peer} reported a failed KV push for {rid}: "
                                              f"{msg.get('error', 'no reason given')}"))
        elif len(data) != size or hashlib.sha256(data).hexdigest() != msg.get("sha256"):
            m.kv_transfers.labels(peer, "recv", "checksum_error").inc()
            fut.set_exception(KVTransferError(f"KV pushed by {peer} failed verification ({len(data)} bytes, expected "
                                              f"{size}; checksum mismatch)"))
        else:
            m.kv_transfers.labels(peer, "recv", "ok").inc()
            fut.set_result(len(data))

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for server in self.servers:
            await server.wait_closed()


def _layer_sizes(total: int, layers: int) -> list[int]:
    per, rest = divmod(total, layers)
    return [per + (1 if i < rest else 0) for i in range(layers) if per or i < rest]


async def push_kv(*, params: dict, request_id: str, data: bytes, layers: int, local_host: str, api_endpoint: str,
                  engine_id: str, metrics, kv_scale: int, corrupt: bool = False, timeout: float = 30.0) -> None:
    """P side: push `data` to the Decode named by its kv_transfer_params, layer by layer, and tell it it is done."""
    reader, writer, peer = await open_side_channel(params, local_host, metrics, "send", timeout,
                                                   "the Decode's KV side channel")
    try:
        writer.write(_line({"op": "get_meta", "peer": api_endpoint}))
        meta = json.loads(await asyncio.wait_for(reader.readline(), timeout) or b"{}")
        peer = str(meta.get("peer", peer))
        if meta.get("engine_id") == engine_id:  # update_decoder_info's assert
            raise KVTransferError(f"Conflict engine id {engine_id} with local engine id {engine_id}.")
        sha = hashlib.sha256(data).hexdigest()
        wire = bytes([data[0] ^ 0xFF]) + data[1:] if corrupt else data
        start = 0
        for layer, size in enumerate(_layer_sizes(len(wire), layers)):
            writer.write(_line({"op": "layer", "request_id": request_id, "layer": layer, "size": size}))
            writer.write(wire[start:start + size])
            start += size
            await writer.drain()
        writer.write(_line({"op": "done", "request_id": request_id, "ok": True, "sha256": sha}))
        await writer.drain()
        ack = json.loads(await asyncio.wait_for(reader.readline(), timeout) or b"{}")
        if not ack.get("ok"):
            raise KVTransferError(f"decode {peer} did not acknowledge the push of {request_id}")
    except KVTransferError:
        metrics.kv_transfers.labels(peer, "send", "error").inc()
        raise
    except (TimeoutError, OSError, asyncio.IncompleteReadError, json.JSONDecodeError) as exc:
        metrics.kv_transfers.labels(peer, "send", "error").inc()
        raise KVTransferError(f"KV push to {peer} broke: {exc!r}") from exc
    finally:
        writer.close()
    metrics.kv_bytes.labels(peer, "send").inc(len(data))
    metrics.kv_model_bytes.labels(peer, "send").inc(len(data) * kv_scale)
    metrics.kv_transfers.labels(peer, "send", "ok").inc()


async def report_failed_push(*, params: dict, request_id: str, error: str, local_host: str, api_endpoint: str) -> None:
    """FAILED_SENDING_MSG on a fresh connection, as the real connector's callback sends it; best effort."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            params["remote_host"], int(params["remote_port"]), local_addr=(local_host, 0)), FAILED_NOTICE_TIMEOUT_S)
    except (TimeoutError, OSError):
        return
    try:
        writer.write(_line({"op": "get_meta", "peer": api_endpoint}))
        writer.write(_line({"op": "done", "request_id": request_id, "ok": False, "error": error}))
        await writer.drain()
        for _answer in ("meta", "ack"):
            await asyncio.wait_for(reader.readline(), FAILED_NOTICE_TIMEOUT_S)
    except (TimeoutError, OSError):
        pass
    finally:
        writer.close()
