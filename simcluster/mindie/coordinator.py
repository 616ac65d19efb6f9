"""The MindIE-MS coordinator (pd_separate): HTTP on the pod IP's predict port (1025) and manage port (1026).

It polls every P and D server pod's /health; once all answer (Pending pods never do) it logs
`MindIE-MS coordinator is ready!!!`. A request is prefilled on a P (max_tokens 1, kv_transfer_params
do_remote_decode) and decoded on a D with the P's kv_transfer_params: the engines' MooncakeConnectorV1 protocol
(simcluster/engine/server.py), as pdproxy does it (pdproxy/leg_bodies.py). Before ready, 503.
Predict port: POST /v1/chat/completions, /v1/completions (JSON or SSE, usage), GET /v1/models.
Manage port: GET /v1/startup, /v1/health, /v1/readiness (200 once ready, else 503), /v1/status (instances, pods,
health, outstanding requests), /metrics (coordinator_metrics.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from simcluster.mindie.coordinator_metrics import CoordinatorMetrics
from simcluster.mindie.routing import Instance, NoInstance, ServerPod, instances_from_plan, pick

log = logging.getLogger("mindie-ms-coordinator")
READY_LINE = "MindIE-MS coordinator is ready!!!"
NOT_READY_LINE = "MindIE-MS coordinator is not ready..."
PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def prefill_body(body: dict) -> dict:
    pb = dict(body, kv_transfer_params=PREFILL_KV, stream=False, max_tokens=1)
    if "max_completion_tokens" in pb:
        pb["max_completion_tokens"] = 1
    pb.pop("stream_options", None)
    return pb


class Coordinator:
    def __init__(self, plan: dict):
        self.plan = plan
        self.instances: list[Instance] = instances_from_plan(plan)
        self.metrics = CoordinatorMetrics()
        self.ready = False
        self.session: aiohttp.ClientSession | None = None

    @property
    def pods(self) -> list[ServerPod]:
        return [p for i in self.instances for p in i.pods]

    async def _healthy(self, pod: ServerPod) -> bool:
        if pod.url is None:
            return False
        try:
            async with self.session.get(pod.url + "/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    async def watch_health(self) -> None:
        rounds = 0
        while True:
            results = await asyncio.gather(*(self._healthy(p) for p in self.pods))
            for pod, ok in zip(self.pods, results, strict=True):
                pod.healthy = ok
            ready = all(results)
            if ready != self.ready or (not ready and rounds % 50 == 0):
                if ready:
                    log.info(READY_LINE)
                else:
                    waiting = [p.name for p in self.pods if not p.healthy]
                    log.info("%s waiting for %d server pod(s): %s", NOT_READY_LINE, len(waiting), ", ".join(waiting))
            self.ready = ready
            rounds += 1
            await asyncio.sleep(1.0 if ready else 0.2)

    # -- predict port --
    async def models(self, _request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.plan["model"], "object": "model", "created": int(time.time()), "owned_by": "MindIE Server"}]})

    async def generate(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        if not self.ready:
            return _error(503, "MindIE-MS coordinator is not ready: not every P and D instance is up",
                          "ServiceUnavailableError")
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(400, f"malformed JSON body: {exc}", "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object", "BadRequestError")
        self.metrics.received.inc()
        try:
            p_inst, p_pod = pick(self.instances, "prefill")
            d_inst, d_pod = pick(self.instances, "decode")
        except NoInstance as exc:
            self.metrics.failed.inc()
            return _error(503, str(exc), "ServiceUnavailableError")
        started = time.monotonic()
        self.metrics.running.inc()
        p_pod.outstanding += 1
        d_pod.outstanding += 1
        try:
            return await self._prefill_then_decode(request, endpoint, body, (p_inst, p_pod), (d_inst, d_pod),
                                                   started)
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.metrics.failed.inc()
            return _error(502, f"server pod unreachable: {exc!r}", "BadGatewayError")
        finally:
            p_pod.outstanding -= 1
            d_pod.outstanding -= 1
            self.metrics.running.dec()

    async def _prefill_then_decode(self, request, endpoint, body, prefill, decode, started):
        (p_inst, p_pod), (d_inst, d_pod) = prefill, decode
        async with self.session.post(p_pod.url + endpoint, json=prefill_body(body)) as resp:
            raw = await resp.read()
            if resp.status != 200:
                self.metrics.failed.inc()
                return web.Response(status=resp.status, body=raw, content_type="application/json")
        kv = json.loads(raw).get("kv_transfer_params")
        if not kv:
            self.metrics.failed.inc()
            return _error(502, f"prefill pod {p_pod.name} returned no kv_transfer_params", "BadGatewayError")
        p_pod.served += 1
        self.metrics.routed.labels(role="prefill", instance=str(p_inst.index), pod=p_pod.name).inc()
        stream = bool(body.get("stream"))
        client_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        dbody = dict(body, kv_transfer_params=kv)
        if stream:
            dbody["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        async with self.session.post(d_pod.url + endpoint, json=dbody) as resp:
            if resp.status != 200:
                self.metrics.failed.inc()
                return web.Response(status=resp.status, body=await resp.read(), content_type="application/json")
            d_pod.served += 1
            self.metrics.routed.labels(role="decode", instance=str(d_inst.index), pod=d_pod.name).inc()
            if not stream:
                raw = await resp.read()
                self.metrics.ttft.observe(time.monotonic() - started)
                self.metrics.answered(json.loads(raw).get("usage"))
                self.metrics.e2e.observe(time.monotonic() - started)
                return web.Response(body=raw, content_type="application/json")
            return await self._relay_stream(request, resp, client_usage, started)

    async def _relay_stream(self, request, resp, client_usage: bool, started: float) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await out.prepare(request)
        usage, first, event = None, True, b""
        async for line in resp.content:
            event += line
            if line.strip():
                continue
            data = event.strip()
            event = b""
            if not data:
                continue
            if data.startswith(b"data: {") and b'"usage"' in data:
                chunk = json.loads(data[6:])
                if chunk.get("usage") and not chunk.get("choices"):
                    usage = chunk["usage"]
                    if not client_usage:
                        continue
            if first and data != b"data: [DONE]":
                self.metrics.ttft.observe(time.monotonic() - started)
                first = False
            await out.write(data + b"\n\n")
        await out.write_eof()
        self.metrics.answered(usage)
        self.metrics.e2e.observe(time.monotonic() - started)
        return out

    # -- manage port --
    async def probe(self, _request) -> web.Response:
        status = 200 if self.ready else 503
        return web.json_response({"ready": self.ready}, status=status)

    async def status(self, _request) -> web.Response:
        return web.json_response({"ready": self.ready, "model": self.plan["model"], "instances": [
            {"role": i.role, "instance": i.index, "pods": [
                {"name": p.name, "url": p.url, "healthy": p.healthy, "outstanding": p.outstanding,
                 "served": p.served} for p in i.pods]} for i in self.instances]})

    async def metrics_page(self, _request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


def predict_app(c: Coordinator) -> web.Application:
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", lambda r: c.generate(r, "/v1/chat/completions"))
    app.router.add_post("/v1/completions", lambda r: c.generate(r, "/v1/completions"))
    app.router.add_get("/v1/models", c.models)
    return app


def manage_app(c: Coordinator) -> web.Application:
    app = web.Application()
    for path in ("/v1/startup", "/v1/health", "/v1/readiness"):
        app.router.add_get(path, c.probe)
    app.router.add_get("/v1/status", c.status)
    app.router.add_get("/metrics", c.metrics_page)
    return app


async def serve(plan: dict) -> int:
    c = Coordinator(plan)
    c.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
    runners = []
    try:
        for app, port in ((predict_app(c), plan["predict_port"]), (manage_app(c), plan["manage_port"])):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, plan["host"], port).start()
            runners.append(runner)
        log.info("coordinator listening: predict http://%s:%d, manage http://%s:%d; %d instance(s), %d server pod(s)",
                 plan["host"], plan["predict_port"], plan["host"], plan["manage_port"], len(c.instances), len(c.pods))
        watcher = asyncio.get_running_loop().create_task(c.watch_health())
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        watcher.cancel()
    finally:
        for runner in runners:
            await runner.cleanup()
        await c.session.close()
    return 0
