"""The engine's HTTP surface (vLLM's OpenAI API, /health, /metrics) and its PD roles.

Prefill (kv_producer) + `kv_transfer_params.do_remote_decode`: prefill, hold the KV bytes, answer
with the params MooncakeConnectorV1 returns. Decode (kv_consumer) + `do_remote_prefill`: pull the
bytes from remote_host:remote_port, verify, then decode. With MooncakeLayerwiseConnector the Decode comes first and
the Prefill pushes (engine/layerwise.py). Without PD params an engine serves the request locally, as a plain vLLM
would.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import os
import time
import uuid

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from simcluster import nodestate, profiles
from simcluster.engine import answers, textgen
from simcluster.engine.config import ConfigError, EngineConfig
from simcluster.engine.core import FINISHED, EngineCore, Request
from simcluster.engine.kv_publisher import PublisherError, publishers_for
from simcluster.engine.kvwire import HeldKV, KVServer, KVTransferError, pull_kv
from simcluster.engine.layerwise import CONNECTOR as LAYERWISE
from simcluster.engine.layerwise import ClientGone, Layerwise, external_request_id
from simcluster.engine.lookup import LookupSockets
from simcluster.engine.metrics import EngineMetrics
from simcluster.engine.poolconfig import MooncakePool
from simcluster.engine.prefix import KVPool, LocalPrefixCache, MemcacheClient, PoolLoadError
from simcluster.kvpool import PoolAgent, PoolAgentError

log = logging.getLogger("simcluster.engine")
KV_GIB_PER_DIE = 4  # KV capacity the cost model grants each die (see README)


class Engine:
    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.m = EngineMetrics()
        self.api = f"{cfg.host}:{cfg.port}"
        self.pid = os.getpid()
        capacity = cfg.tp * KV_GIB_PER_DIE * (1 << 30) // cfg.profile.kv_bytes_per_token
        if cfg.num_gpu_blocks:
            capacity = cfg.num_gpu_blocks * profiles.BLOCK_SIZE
        self.cores = [EngineCore(rank=r, tp=cfg.tp, max_num_seqs=cfg.max_num_seqs, profile=cfg.profile,
                                 metrics=self.m, labels={"model_name": cfg.served_names[0], "engine": str(r)},
                                 capacity_tokens=capacity, is_hung=self._hung) for r in cfg.dp_ranks]
        for core in self.cores:
            self.m.add_engine(**core.labels)  # vLLM exports every series at zero before the first request
            if cfg.enable_prefix_caching:
                core.prefix = LocalPrefixCache(capacity // profiles.BLOCK_SIZE)
        self._rr = itertools.count()
        self._block_ids = itertools.count(1)
        self.kv = KVServer(self.api, self.m, profiles.kv_scale(), cfg.abort_timeout_s, corrupt=self._corrupt)
        self.layerwise = Layerwise(self) if cfg.kv_connector == LAYERWISE else None
        self.block_bytes = profiles.held_bytes(cfg.profile, profiles.BLOCK_SIZE)
        self.pool: KVPool | None = None  # the AscendStoreConnector's pool, from start_connectors()
        self.agent: PoolAgent | None = None
        self.lookups = LookupSockets(cfg.lookup_sockets, self._lookup_answer)
        self._faults: dict = {}
        self._faults_checked = 0.0
        self.kv_publishers = []  # KV cache events, one per DP rank (engine/kv_publisher.py), from start()

    # -- faults (written by `python -m simcluster fault`, read here at most every 0.2 s) --
    def _fault_list(self, kind: str) -> list:
        now = time.monotonic()
        if now - self._faults_checked > 0.2:
            self._faults = nodestate.faults(self.cfg.node_dir)
            self._faults_checked = now
        return self._faults.get(kind, [])

    def _hung(self) -> bool:
        return self.pid in self._fault_list("hang")

    def kv_events_gap(self) -> bool:
        return self.pid in self._fault_list("kv_events_gap")

    def _corrupt(self) -> bool:
        return self.pid in self._fault_list("corrupt_kv")

    # -- lifecycle --
    async def start_connectors(self) -> None:
        """What the real workers do before the API listens: bind the pool's lookup sockets, join the pool (for the
        mooncake backend a store client registering its segment with the master named by mooncake.json)."""
        cfg = self.cfg
        if cfg.store is None:
            return
        await self.lookups.start()
        if isinstance(cfg.pool, MooncakePool):
            t0 = time.monotonic()
            try:
                self.agent = await PoolAgent.start(
                    master=cfg.pool.master, advertise=cfg.host, segment_bytes=cfg.pool.sim_segment_size,
                    local_buffer_bytes=cfg.pool.sim_local_buffer, prefer_same_node=cfg.pool.prefer_alloc_in_same_node,
                    preferred_segment=cfg.pool.preferred_segment)
            except PoolAgentError as exc:
                log.error("Initialize mooncake failed. %s, metadata_server=%s. Check mooncake config and network.",
                          exc, cfg.pool.metadata_server)
                raise ConfigError("RuntimeError: Initialize mooncake failed.") from None
            log.info("Mooncake store client up in %.2f s: segment %s (%d bytes) on master %s", time.monotonic() - t0,
                     self.agent.segment, cfg.pool.sim_segment_size, cfg.pool.master)
            client = self.agent.client()
        else:
            client = MemcacheClient(cfg.pool.servers, cfg.pool.replicas)
            log.info("KV pool (memcache stand-in): memcached ring %s, %d replicas", ",".join(cfg.pool.servers),
                     cfg.pool.replicas)
        self.pool = KVPool(backend=cfg.store.backend, client=client, model=cfg.model, block_bytes=self.block_bytes,
                           metrics=self.m, loads=cfg.store.loads, puts=cfg.store.puts)

    async def _lookup_answer(self, hashes: list[str]) -> int:
        return await self.pool.lookup(hashes) if self.pool else 0

    async def close(self) -> None:
        await self.lookups.close()
        if self.pool is not None:
            self.pool.close()
        if self.agent is not None:
            await self.agent.close()
        await self.kv.close()
        for publisher in self.kv_publishers:
            publisher.close()
        if self.layerwise is not None:
            await self.layerwise.close()

    async def start(self) -> None:
        for core in self.cores:
            core.start()
        try:
            self.kv_publishers = publishers_for(self)
        except PublisherError as exc:
            raise ConfigError(str(exc)) from None
        if self.cfg.kv_connector and self.layerwise is None and self.cfg.kv_role in ("kv_producer", "kv_both"):
            # The real connector binds one side-channel port per die it drives (docs/ascend-pd-launch-facts.md §1.5).
            ports = [self.cfg.kv_port + r * self.cfg.tp + t for r in self.cfg.dp_ranks for t in range(self.cfg.tp)]
            await self.kv.start(self.cfg.host, ports)
        if self.layerwise is not None:
            await self.layerwise.start()
        asyncio.get_running_loop().create_task(self._housekeeping())

    async def _housekeeping(self) -> None:
        last_busy, last_t = 0.0, time.monotonic()
        while True:
            self.kv.expire()
            held = sum(kv.tokens for kv in self.kv.held.values())
            for core in self.cores:
                if core.held_tokens != held:  # an idle core publishes nothing else: its usage gauge would go stale
                    core.held_tokens = held
                    core.publish()
            busy = sum(c.busy_s for c in self.cores)
            now = time.monotonic()
            load = min(1.0, (busy - last_busy) / max(now - last_t, 1e-6) / len(self.cores))
            last_busy, last_t = busy, now
            self.register(load)
            await asyncio.sleep(1.0)

    def register(self, load: float = 0.0) -> None:
        if self.cfg.node_dir:
            nodestate.register_engine(self.cfg.node_dir, {
                "pid": self.pid, "role": self.cfg.kv_role, "api": self.api, "model": self.cfg.model,
                "devices": self.cfg.devices, "hbm_mb": self.cfg.hbm_mb_per_die, "load": round(load, 3),
                "kv_port": self.cfg.kv_port, "dp_ranks": self.cfg.dp_ranks, "tp": self.cfg.tp})

    def unregister(self) -> None:
        if self.cfg.node_dir:
            (self.cfg.node_dir / "engines" / f"{self.pid}.json").unlink(missing_ok=True)

    # -- request handling --
    def _pick_core(self) -> EngineCore:
        return min(self.cores, key=lambda c: (c.load(), next(self._rr) % 997))

    async def generate(self, body: dict, chat: bool, request_id: str, gone=lambda: False):
        """Returns (Request, core, kv_transfer_params for the response or None). `gone()`: the client went away
        (a layerwise Decode waiting for its KV then aborts: ClientGone)."""
        prompt = textgen.chat_prompt(body.get("messages", [])) if chat else body.get("prompt", "")
        tokens = textgen.tokenize(prompt)
        limit = self.cfg.max_model_len
        if len(tokens) > limit:
            # vLLM tokenizes at most max_model_len + 1 tokens to check this, hence "at least" and that value.
            raise RequestError(400, f"This model's maximum context length is {limit} tokens. However, your prompt "
                               f"contains at least {limit + 1} input tokens, which exceeds this limit even without "
                               f"any output tokens. Please reduce the length of the input prompt. "
                               f"(parameter=input_tokens, value={limit + 1})", param="input_tokens")
        max_tokens = _int_field(body, "max_completion_tokens" if body.get("max_completion_tokens") is not None
                                else "max_tokens")
        if max_tokens is not None and max_tokens < 1:
            raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}. (parameter=max_tokens, "
                               f"value={max_tokens})", param="max_tokens")
        if max_tokens is None:
            max_tokens = 16 if not chat else max(1, limit - len(tokens))
        params = body.get("kv_transfer_params") or {}
        pushes = bool(params.get("do_remote_decode") and self.layerwise and self.cfg.kv_role != "kv_consumer")
        if pushes:
            self.layerwise.check_push_params(params)
        core = self._pick_core()
        labels = core.labels
        n = len(tokens)
        hashes = textgen.block_hashes(self.cfg.model, tokens, profiles.BLOCK_SIZE, self.cfg.hash_seed)
        local = core.prefix.match(hashes) if core.prefix else 0  # leading blocks already in this core's cache
        self.m.prefix_queries.labels(**labels).inc(n)
        self.m.prefix_hits.labels(**labels).inc(local * profiles.BLOCK_SIZE)
        need, loaded, external = n - local * profiles.BLOCK_SIZE, 0, 0
        if params.get("do_remote_prefill") and self.cfg.kv_connector and self.cfg.kv_role in ("kv_consumer",
                                                                                             "kv_both"):
            # MooncakeConnectorV1 claims the tokens the local cache lacks; the whole prompt's KV is pulled.
            self.m.external_queries.labels(**labels).inc(n)
            expected = profiles.held_bytes(self.cfg.profile, n)
            try:
                if self.layerwise is not None:  # the Decode's own cache hit stays; the Prefill pushes the rest
                    cached = min(n - need, (n - 1) // profiles.BLOCK_SIZE * profiles.BLOCK_SIZE)
                    need = await self.layerwise.receive(params, external_request_id(request_id, chat), core, n,
                                                        cached, gone)
                else:
                    await pull_kv(params=params, local_host=self.cfg.host, api_endpoint=self.api,
                                  expected_size=expected, metrics=self.m, kv_scale=profiles.kv_scale())
                self.m.external_hits.labels(**labels).inc(need)
                external, need = need, 0
            except KVTransferError as exc:
                if self.cfg.kv_load_failure_policy != "recompute":
                    raise self._load_failed(core, exc, need) from exc
                log.warning("%s; recomputing the prompt locally", exc)
        elif self.pool is not None and self.pool.loads:
            self.m.external_queries.labels(**labels).inc(n)
            rest = hashes[local:]
            found = await self.pool.lookup(rest)
            try:
                loaded = await self.pool.load(rest[:found])
            except PoolLoadError as exc:
                if self.cfg.kv_load_failure_policy != "recompute":
                    raise self._load_failed(core, exc, len(rest[:found]) * profiles.BLOCK_SIZE) from exc
                log.warning("%s; recomputing from block %d", exc, local + exc.loaded)
                loaded = exc.loaded
            external = loaded * profiles.BLOCK_SIZE
            self.m.external_hits.labels(**labels).inc(external)
            need -= external
        else:
            need = max(need, 1)  # vLLM recomputes at least the last prompt token, whatever the caches hold
        req = Request(request_id=request_id, tokens=tokens, max_tokens=max_tokens, need_prefill_tokens=need,
                      load_tokens=loaded * profiles.BLOCK_SIZE, external_tokens=external,
                      script=self._script(body, chat),
                      ignore_eos=body.get("ignore_eos") is True)
        req.on_prefilled.append(lambda: self._after_prefill(core, hashes, skip=local + loaded, tokens=tokens))
        core.submit(req)
        out_params = None
        if pushes:  # MooncakeLayerwiseConnector keeps nothing for the Decode: request_finished returns no params
            req.on_prefilled.append(self.layerwise.push_when_prefilled(external_request_id(request_id, chat), params,
                                                                        req, core))
        elif params.get("do_remote_decode") and self.cfg.kv_connector and self.cfg.kv_role in ("kv_producer",
                                                                                              "kv_both"):
            out_params = self._hold_kv(request_id, req, core, hashes)
        return req, core, out_params

    def _after_prefill(self, core: EngineCore, hashes: list[str], skip: int, tokens: list[int] = ()) -> None:
        """The prompt's blocks now sit in this core's cache; the pool gets those it lacks, in the background."""
        if core.prefix:
            core.prefix.insert(hashes, tokens)
        if self.pool is not None and self.pool.puts:
            self.pool.backup(hashes[skip:])

    async def pushed(self, request_id: str) -> None:
        """A layerwise Prefill answers once its push is over (no-op otherwise)."""
        if self.layerwise is not None:
            await self.layerwise.pushed(request_id)

    def _failed(self, core: EngineCore) -> None:
        self.m.success.labels(**core.labels, finished_reason="error").inc()

    def _load_failed(self, core: EngineCore, exc: Exception, tokens: int) -> RequestError:
        """kv_load_failure_policy=fail: the request ends with finished_reason error and the client gets vLLM's
        bare 500; why is in the log only (vLLM's scheduler line, then the connector's reason)."""
        self._failed(core)
        log.error("Failing 1 request(s) due to KV load failure (failure_policy=%s, %d tokens affected): %s",
                  self.cfg.kv_load_failure_policy, tokens, exc)
        return RequestError(500, "Internal server error", "InternalServerError")

    def _script(self, body: dict, chat: bool) -> list[tuple[int, str]] | None:
        """The answer book's reply, token by token, when the request asks one of its questions. P and D both
        script it: P's one token is the reply's first, and D (which the proxy's client hears) emits all of it."""
        reply = self.cfg.answers.reply(answers.asked_text(body, chat)) if self.cfg.answers else None
        return textgen.scripted_tokens(reply) if reply else None

    def _hold_kv(self, request_id: str, req: Request, core: EngineCore, hashes: list[str]) -> dict:
        tokens = req.tokens
        size = profiles.held_bytes(self.cfg.profile, len(tokens))
        nblocks = -(-len(tokens) // profiles.BLOCK_SIZE)
        # Deterministic bytes: full blocks from their prefix hash, the tail from the whole prompt.
        seed = hashes + [hashlib.sha256(str(tokens).encode()).hexdigest()[:32]] * (nblocks - len(hashes))
        per = size // nblocks
        data = b"".join(textgen.block_bytes(s, per) for s in seed)
        data += textgen.block_bytes("tail" + seed[-1], size - len(data))
        block_ids = [next(self._block_ids) for _ in range(nblocks)]
        self.kv.hold(request_id, HeldKV(data, hashlib.sha256(data).hexdigest(), block_ids, len(tokens)))
        rank = core.rank
        return {
            "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": block_ids,
            "remote_engine_id": self.cfg.engine_ids[rank], "remote_request_id": request_id,
            "remote_host": self.cfg.host, "remote_port": self.cfg.kv_port + rank * self.cfg.tp,
            "remote_pcp_size": 1, "remote_dcp_size": 1, "remote_ptp_size": self.cfg.tp,
            "last_token_id": req.token(0)[0], "remote_multi_nodes_meta_mapping": None,
            "num_prompt_blocks": nblocks, "remote_block_size": profiles.BLOCK_SIZE,
        }


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _error(message: str, kind: str = "BadRequestError", code: int = 400, param: str | None = None) -> dict:
    """vLLM's ErrorResponse: every error body has message, type, param and code (the HTTP status)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class RequestError(Exception):
    """A request vLLM refuses: answered with status and vLLM's error body."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.body = status, _error(message, kind, status, param)

    def response(self) -> web.Response:
        return web.json_response(self.body, status=self.status)


def _validation_error(loc: str, kind: str, msg: str, value, **extra) -> RequestError:
    """What vLLM answers when FastAPI/pydantic rejects the body: type "Bad Request", param = the location, the
    message pydantic's error as a dict repr (e.g. {'type': 'dict_type', 'loc': 'body.kv_transfer_params', ...})."""
    detail = {"type": kind, "loc": loc, "msg": msg, "input": value, **extra}
    return RequestError(400, f"1 validation error:\n  {detail}", "Bad Request", loc)


def _int_field(body: dict, name: str) -> int | None:
    """An optional integer field as pydantic (lax mode) reads it: ints, integral floats and integer strings."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise _validation_error(f"body.{name}", "int_from_float",
                                "Input should be a valid integer, got a number with a fractional part", value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise _validation_error(f"body.{name}", "int_parsing",
                                    "Input should be a valid integer, unable to parse string as an integer",
                                    value) from None
    raise _validation_error(f"body.{name}", "int_type", "Input should be a valid integer", value)


def _parse_body(raw: bytes) -> dict:
    """The request body as vLLM's FastAPI app validates it before any handler runs."""
    try:
        body = json.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError, or bytes that are not UTF-8
        pos = getattr(exc, "pos", 0)
        reason = getattr(exc, "msg", None) or str(exc)
        raise _validation_error(f"body.{pos}", "json_invalid", "JSON decode error", "<dict of 0 items>",
                                ctx={"error": reason}) from None
    if not isinstance(body, dict):
        raise _validation_error("body", "model_attributes_type",
                                "Input should be a valid dictionary or object to extract fields from", body)
    params = body.get("kv_transfer_params")
    if params is not None and not isinstance(params, dict):
        raise _validation_error("body.kv_transfer_params", "dict_type", "Input should be a valid dictionary",
                                params)
    return body


def build_app(engine: Engine) -> web.Application:
    cfg = engine.cfg
    app = web.Application(client_max_size=64 << 20)

    async def health(_request):
        return web.Response(status=200)

    async def reset_prefix_cache(_request):
        """vLLM's: every engine core's local prefix cache emptied (reset_external, the connector's cache, is left
        alone: the pool's blocks are shared with other instances); 200 with no body."""
        for core in engine.cores:
            if core.prefix is not None:
                core.prefix.clear()
        log.info("Resetting prefix cache...")
        return web.Response(status=200)

    async def models(_request):
        """vLLM's model card, built per request (so `created` is now), one per served name."""
        now = int(time.time())
        data = [{"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": cfg.model,
                 "parent": None, "max_model_len": cfg.max_model_len,
                 "permission": [{"id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission",
                                 "created": now, "allow_create_engine": False, "allow_sampling": True,
                                 "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                                 "allow_fine_tuning": False, "organization": "*", "group": None,
                                 "is_blocking": False}]} for name in cfg.served_names]
        return web.json_response({"object": "list", "data": data})

    async def metrics(_request):
        return web.Response(body=generate_latest(engine.m.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def load(_request):
        return web.json_response({"server_load": sum(c.load() for c in engine.cores)})

    async def completion(request: web.Request, chat: bool):
        try:
            body = _parse_body(await request.read())
        except RequestError as exc:
            return exc.response()
        model = body.get("model") or cfg.served_names[0]
        if model not in cfg.served_names:
            return RequestError(404, f"The model `{model}` does not exist. Valid aliases: "
                                f"{', '.join(cfg.served_names)}.", "NotFoundError", "model").response()
        rid = ("chatcmpl-" if chat else "cmpl-") + (request.headers.get("X-Request-Id") or uuid.uuid4().hex)
        try:
            req, core, out_params = await engine.generate(body, chat, rid, gone=lambda: _gone(request))
        except RequestError as exc:
            return exc.response()
        except ClientGone:
            return web.Response(status=499)  # nobody reads it
        if body.get("stream"):
            return await _stream(request, engine, core, req, body, chat, model, out_params)
        text, finish = [], None
        try:
            while (item := await req.out.get()) is not FINISHED:
                text.append(item[1])
                finish = item[2]
        except asyncio.CancelledError:  # the client went away
            core.abort(req)
            raise
        await engine.pushed(external_request_id(rid, chat))
        prompt_n, gen_n = len(req.tokens), req.generated
        choice = ({"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                   "finish_reason": finish, "stop_reason": None} if chat else
                  {"index": 0, "text": "".join(text), "logprobs": None, "finish_reason": finish, "stop_reason": None})
        resp = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": model, "choices": [choice],
                "usage": {"prompt_tokens": prompt_n, "completion_tokens": gen_n, "total_tokens": prompt_n + gen_n},
                "kv_transfer_params": out_params}
        return web.json_response(resp)

    app.router.add_get("/health", health)
    app.router.add_get("/ping", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/load", load)
    app.router.add_get("/version", lambda _r: web.json_response({"version": "0.0.0+simcluster"}))
    # vLLM's KV event publishers per DP rank ({} without --kv-events-config), a tcp://*:0 endpoint as bound
    app.router.add_get("/kv_event_sources", lambda _r: web.json_response(
        {str(p.rank): p.source for p in engine.kv_publishers}))
    if os.environ.get("VLLM_SERVER_DEV_MODE") == "1":  # vLLM mounts its dev routes only then
        app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_post("/v1/completions", lambda r: completion(r, False))
    app.router.add_post("/v1/chat/completions", lambda r: completion(r, True))
    return app


async def _stream(request, engine, core, req, body, chat, model, out_params):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    created = int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(choices, **extra):
        data = {"id": req.request_id, "object": kind, "created": created, "model": model, "choices": choices}
        data.update(extra)
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    try:
        if chat:
            await resp.write(chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}]))
        while (item := await req.out.get()) is not FINISHED:
            _tid, text, finish = item
            choice = ({"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
                      if chat else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                    "stop_reason": None})
            extra = {"kv_transfer_params": out_params} if finish and out_params else {}
            await resp.write(chunk([choice], **extra))
        await engine.pushed(external_request_id(req.request_id, chat))
        if (body.get("stream_options") or {}).get("include_usage"):
            n, g = len(req.tokens), req.generated
            await resp.write(chunk([], usage={"prompt_tokens": n, "completion_tokens": g, "total_tokens": n + g}))
        await resp.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        core.abort(req)
        raise
    return resp
