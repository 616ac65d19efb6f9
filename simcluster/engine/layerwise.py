"""An engine with kv_connector MooncakeLayerwiseConnector, as vllm-ascend's connector behaves seen from outside
(vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_layerwise_connector.py; docs/ascend-pd-launch-facts.md §2.6).

Decode (kv_consumer) given do_remote_prefill + metaserver: allocates the prompt's blocks, POSTs its own
kv_transfer_params to the metaserver (update_state_after_alloc + _access_metaserver: 3 tries, the answer's status
not read) and waits for the Prefill's push on its side channel (kvpush.py) before it decodes.
Prefill (kv_producer) given the Decode's params: prefills, pushes the KV of the tokens the Decode lacks
(remote_cached_tokens on) layer by layer, tells the Decode it is done, and only then answers (wait_for_save ends the
step once every layer has gone). It keeps nothing: request_finished returns no kv_transfer_params.

Where the real Decode would wait forever the simulator gives up, as a KV load failure (kv_load_failure_policy):
the metaserver cannot be reached after the 3 tries (the real one logs "Access metaserver fail" and keeps waiting),
or no push came within SIMCLUSTER_KV_PUSH_TIMEOUT_S. A client that goes away while its Decode waits aborts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

import aiohttp
from aiohttp import web

from simcluster import profiles
from simcluster.engine import textgen
from simcluster.engine.kvpush import KVReceiver, push_kv, report_failed_push
from simcluster.engine.kvwire import KVTransferError

log = logging.getLogger("simcluster.engine")
CONNECTOR = "MooncakeLayerwiseConnector"
LAYERS = {"deepseek-r1": 61, "qwen3-235b": 94, "generic-8b": 32}  # the profiles' models (simcluster/profiles.py)
METASERVER_TRIES = 3
METASERVER_CONNECT_TIMEOUT_S = 5.0
WAIT_STEP_S = 0.1  # how often a waiting Decode looks at its client
PUSH_PARAMS = ("remote_host", "remote_port", "remote_cached_tokens")  # what a Prefill reads of the Decode's params


class ClientGone(Exception):
    """The client of a Decode waiting for its KV went away: the request was aborted."""


def external_request_id(request_id: str, chat: bool) -> str:
    """vLLM's request id as the connector names it (the engine core's random suffix cut off): chat
    "chatcmpl-<X-Request-Id>", a completion's (first) prompt "cmpl-<X-Request-Id>-0"."""
    return request_id if chat else f"{request_id}-0"


class Layerwise:
    def __init__(self, engine):
        self.engine = engine
        self.cfg = engine.cfg
        self.receiver = KVReceiver(engine.api, engine.m, profiles.kv_scale())
        self.pushes: dict[str, asyncio.Task] = {}  # Prefill: request id -> its push
        self.calls: set[asyncio.Task] = set()  # Decode: metaserver calls still under way
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        cfg = self.cfg
        if cfg.kv_role in ("kv_consumer", "kv_both"):  # the Decode binds the side channel, the Prefill connects
            ports = {cfg.kv_port + r * cfg.tp + t: cfg.engine_ids[r] for r in cfg.dp_ranks for t in range(cfg.tp)}
            await self.receiver.start(cfg.host, ports)

    async def close(self) -> None:
        for task in [*self.pushes.values(), *self.calls]:
            task.cancel()
        await self.receiver.close()
        if self.session is not None:
            await self.session.close()

    # -- Decode --
    async def receive(self, params: dict, request_id: str, core, tokens: int, cached: int, gone) -> int:
        """Ask the metaserver for a Prefill and wait for its push of the tokens past `cached` (this core's prefix
        cache hit); returns the tokens received. KVTransferError when no verified push comes; ClientGone."""
        cfg, engine = self.cfg, self.engine
        nblocks = -(-tokens // profiles.BLOCK_SIZE)
        body = {
            "token_ids": [], "request_id": request_id, "do_remote_prefill": False, "do_remote_decode": True,
            "remote_block_ids": [[next(engine._block_ids) for _ in range(nblocks)]],
            "remote_block_size": [profiles.BLOCK_SIZE], "remote_engine_id": cfg.engine_ids[core.rank],
            "remote_host": cfg.host, "remote_port": cfg.kv_port + core.rank * cfg.tp, "remote_tp_size": cfg.tp,
            "remote_pcp_size": 1, "remote_dcp_size": 1, "remote_cached_tokens": cached,
        }
        url = params.get("metaserver")
        log.info("Send request: %s to proxy metaserver: %s", request_id, url)
        arrived = self.receiver.expect(request_id, profiles.held_bytes(cfg.profile, tokens - cached))
        call = asyncio.get_running_loop().create_task(self._call_metaserver(url, body))
        self.calls.add(call)
        call.add_done_callback(self.calls.discard)
        deadline = asyncio.get_running_loop().time() + cfg.kv_push_timeout_s
        try:
            while not arrived.done():
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise KVTransferError(f"no KV pushed for {request_id} within {cfg.kv_push_timeout_s:g}s "
                                          f"(SIMCLUSTER_KV_PUSH_TIMEOUT_S)")
                await asyncio.wait({arrived, call} if not call.done() else {arrived},
                                   timeout=min(WAIT_STEP_S, left))
                if gone():
                    engine.m.success.labels(**core.labels, finished_reason="abort").inc()
                    raise ClientGone(request_id)
                if call.done() and not arrived.done() and call.exception() is not None:
                    raise KVTransferError(f"Access metaserver fail. error={call.exception()!r}")
            await arrived
            return tokens - cached
        finally:
            self.receiver.forget(request_id)
            if not arrived.done():
                call.cancel()
                arrived.cancel()

    async def _call_metaserver(self, url, body: dict) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"no metaserver URL in kv_transfer_params: {url!r}")
        if self.session is None:
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(local_addr=(self.cfg.host, 0)),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=METASERVER_CONNECT_TIMEOUT_S))
        for attempt in range(1, METASERVER_TRIES + 1):
            try:
                async with self.session.post(url, json=body) as resp:
                    text = await resp.text()
                if resp.status >= 400:  # the real connector does not look at it either
                    log.warning("metaserver %s answered %d for %s: %s", url, resp.status, body["request_id"],
                                text[:200])
                return
            except (aiohttp.ClientError, OSError) as exc:
                log.error("Failed to connect to metaserver. url=%s, retry=%d. ", url, attempt)
                if attempt == METASERVER_TRIES:
                    raise KVTransferError(f"metaserver {url} unreachable after {METASERVER_TRIES} tries: "
                                          f"{exc!r}") from exc

    # -- Prefill --
    @staticmethod
    def check_push_params(params: dict) -> None:
        """The real scheduler reads params["remote_cached_tokens"] and dies of a KeyError without it: the pull
        flow's Prefill params (no Decode named) cannot drive a layerwise Prefill."""
        missing = [k for k in PUSH_PARAMS if params.get(k) is None]
        if missing:
            raise web.HTTPInternalServerError(text=json.dumps({"error": {
                "message": f"KeyError: {missing[0]!r}: a MooncakeLayerwiseConnector Prefill needs the Decode's "
                           f"kv_transfer_params ({', '.join(PUSH_PARAMS)}), which a layerwise proxy's metaserver "
                           f"sends", "type": "InternalServerError", "param": None, "code": 500}}),
                content_type="application/json")

    def push_when_prefilled(self, request_id: str, params: dict, req, core):
        """The callback that starts the push once the prompt is computed."""
        def start():
            task = asyncio.get_running_loop().create_task(self._push(request_id, params, req, core))
            self.pushes[request_id] = task
            task.add_done_callback(lambda t: self.pushes.pop(request_id) if self.pushes.get(request_id) is t else None)
        return start

    async def _push(self, request_id: str, params: dict, req, core) -> None:
        cfg, engine = self.cfg, self.engine
        n = len(req.tokens)
        cached = min(max(int(params.get("remote_cached_tokens") or 0), 0), n - 1)
        size = profiles.held_bytes(cfg.profile, n - cached)
        seed = hashlib.sha256(f"{req.tokens}:{cached}".encode()).hexdigest()
        log.info("Sending transmitting signal b'done_sending_msg' for request %s to %s:%s", request_id,
                 params["remote_host"], params["remote_port"])
        try:
            await push_kv(params=params, request_id=request_id, data=textgen.block_bytes(seed, size),
                          layers=LAYERS.get(cfg.profile.name, 32), local_host=cfg.host, api_endpoint=engine.api,
                          engine_id=cfg.engine_ids[core.rank], metrics=engine.m, kv_scale=profiles.kv_scale(),
                          corrupt=engine._corrupt())
        except (KVTransferError, KeyError, ValueError) as exc:
            log.error("Failed to transfer KV cache for %s: %s", request_id, exc)
            await report_failed_push(params=params, request_id=request_id, error=str(exc), local_host=cfg.host,
                                     api_endpoint=engine.api)

    async def pushed(self, request_id: str) -> None:
        """Until the push of `request_id` (if any) is over; the Prefill answers after it, failed or not."""
        task = self.pushes.pop(request_id, None)
        if task is not None:
            await asyncio.shield(task)
