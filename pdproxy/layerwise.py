"""The layerwise PD flow (`--pd-flow layerwise`, vllm-ascend's MooncakeLayerwiseConnector): Decode first, and the
Prefill when the Decode asks for it (docs/ascend-pd-launch-facts.md §2.6).

1. The client's request goes to a Decode with kv_transfer_params {do_remote_decode: false, do_remote_prefill: true,
   metaserver: "http://<advertised host>:<port>/v1/metaserver"}.
2. The Decode allocates the prompt's blocks and POSTs its own kv_transfer_params to the metaserver, named by its
   request id: vLLM's "chatcmpl-<X-Request-Id>", or "cmpl-<X-Request-Id>-0" for a completion.
3. That call sends the request (max_tokens 1, as in the pull flow) with those params to a Prefill, under the same
   X-Request-Id: the Prefill pushes the KV layer by layer into the Decode, then answers. The call is answered once
   the Prefill has: {"status": "ok"}, or the Prefill leg's error.
4. The Decode decodes, and its answer goes to the client as in the pull flow (exchange.py).

Retries: a Prefill that fails is replaced by another for the same waiting Decode; a Prefill leg that runs out of
instances ends the Decode leg (it would wait for KV that never comes) and the client gets that error. A Decode that
refused the connection is replaced with the same request id; one that failed after taking the request gets a new
id (`-rN`) on the next Decode, which calls the metaserver again.
"""

from __future__ import annotations

import asyncio
import time

from .errors import Answer
from .exchange import Exchange
from .jsonfast import loads
from .leg_bodies import decode_body, prefill_body
from .legs import DECODE, Leg, LegRules, NeedPrefill, judge_decode_head, prompt_tokens, read_whole_done

METASERVER_PATH = "/v1/metaserver"


async def judge_pushed(leg: Leg, ex, lease):
    """A layerwise Prefill's answer, read whole; 2xx means its push is over (it returns no kv_transfer_params).
    Judged: (instance, prompt tokens)."""
    raw = await lease.conn.read_body(ex.remaining())
    read_whole_done(leg, ex, lease, raw)
    try:
        answer = loads(raw)[0]
    except (ValueError, UnicodeDecodeError):
        answer = None
    return lease.backend, prompt_tokens(answer)


PUSHING_PREFILL = LegRules("prefill", judge_pushed, excludes=lambda failure: True, loses_kv=lambda failure: False)
WAITING_DECODE = LegRules("decode", judge_decode_head, excludes=DECODE.excludes, loses_kv=DECODE.loses_kv)


def decode_request_id(endpoint: str, rid: str) -> str:
    """The id vLLM gives the Decode's request (and the connector sends the metaserver) for X-Request-Id `rid`."""
    return f"chatcmpl-{rid}" if endpoint == "/v1/chat/completions" else f"cmpl-{rid}-0"


def prompt_count(body: dict) -> int:
    """Requests vLLM makes of a completion's prompt: one per string or token list in a list of them."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return 1


class Handoff:
    """One Decode attempt waiting for its metaserver call, and the Prefill leg that call starts."""

    __slots__ = ("ex", "body", "rid", "request_id", "prefill", "settled")

    def __init__(self, ex, body: dict, rid: str):
        self.ex = ex
        self.body = body
        self.rid = rid  # X-Request-Id of both legs: the Prefill's request id must match the Decode's
        self.request_id = decode_request_id(ex.endpoint, rid)
        self.prefill: asyncio.Task | None = None
        self.settled = ex.flow.loop.create_future()  # the Prefill leg's outcome: None, or the Answer it failed with

    def settle(self, outcome: Answer | None):
        if not self.settled.done():
            self.settled.set_result(outcome)

    def start(self, params: dict, fast: bool) -> asyncio.Future:
        """The first metaserver call starts the Prefill leg; a repeated call waits for the same one."""
        if self.prefill is None and not self.settled.done():
            self.prefill = self.ex.flow.loop.create_task(self.ex.prefill_for(self, params, fast))
        return self.settled


class Metaserver:
    """`POST /v1/metaserver`: the Decodes' calls, matched by request id to the requests waiting for them."""

    def __init__(self, flow):
        self.flow = flow
        self.pending: dict[str, Handoff] = {}
        self.listening(flow.cfg.port)

    def listening(self, port: int):
        """The URL the Decodes are given, once the port is known (`--port 0` picks one)."""
        host = self.flow.cfg.advertise_host or self.flow.cfg.host
        host = f"[{host}]" if ":" in host else host
        self.url = f"http://{host}:{port}{METASERVER_PATH}"

    def expect(self, ex, body: dict, rid: str) -> Handoff:
        handoff = Handoff(ex, body, rid)
        self.pending[handoff.request_id] = handoff
        return handoff

    def forget(self, handoff: Handoff):
        if self.pending.get(handoff.request_id) is handoff:
            del self.pending[handoff.request_id]
        if handoff.prefill is not None and not handoff.prefill.done():
            handoff.prefill.cancel()  # the client went away, or the Decode it pushed to failed
        handoff.settle(Answer(502, f"request {handoff.rid} ended before its Prefill finished (client gone or its "
                                   f"Decode failed)", "BadGatewayError", "prefill_cancelled"))

    async def handle(self, req, conn):
        if req.method != "POST":
            conn.send_error(405, f"use POST on {METASERVER_PATH}", "MethodNotAllowed")
            return
        await self.answer(req.body, conn, forwarded=False)

    async def answer(self, raw: bytes, conn, forwarded: bool):
        """A Decode's call, to this worker (forwarded: from another worker of --workers N, through the supervisor,
        which asks every worker: the one holding the request answers, the others 404)."""
        try:
            params, fast = loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            conn.send_error(400, f"malformed JSON body: {exc}", "BadRequestError")
            return
        request_id = params.get("request_id") if isinstance(params, dict) else None
        handoff = self.pending.get(request_id) if isinstance(request_id, str) else None
        if handoff is None:
            link = self.flow.link
            if not forwarded and link is not None and isinstance(request_id, str):
                await link.forward_metaserver(raw, conn)
                if conn.status_sent != 404:
                    self.flow.metrics.metaserver_calls.labels("other_worker").value += 1
                    return
            elif forwarded:
                conn.send_error(404, f"unknown metaserver request_id: {request_id!r}", "NotFoundError")
                return
            self.flow.metrics.metaserver_calls.labels("none").value += 1
            self.flow.metrics.error("metaserver_unknown")
            conn.send_error(404, f"unknown metaserver request_id: {request_id!r} (no request of this proxy waits "
                                 f"for it)", "NotFoundError")
            return
        if not forwarded:
            self.flow.metrics.metaserver_calls.labels("this_worker").value += 1
        outcome = await asyncio.shield(handoff.start(params, fast))
        if outcome is None:
            conn.send_response(200, b'{"status": "ok"}')
        else:
            conn.send_error(outcome.status, f"prefill for {request_id} failed: {outcome.message}",
                            outcome.err_type or "BadGatewayError")


class LayerwiseExchange(Exchange):
    """One client request through the layerwise flow; the answer side (run, forward, recompute) is Exchange's."""

    __slots__ = ()

    def __init__(self, flow, req, conn, endpoint: str, body: dict, fast: bool = False):
        super().__init__(flow, req, conn, endpoint, body, fast)
        self.prefill_leg.rules = PUSHING_PREFILL
        self.decode_leg.rules = WAITING_DECODE

    async def through_pd(self, body: dict, rid: str, use):
        flow = self.flow
        if prompt_count(body) != 1:
            raise Answer(400, "the layerwise flow serves one prompt per request", "BadRequestError", "bad_request")
        max_retries = flow.cfg.max_retries
        prefill, decode = self.prefill_leg, self.decode_leg
        raw = self.req.body if body is self.body else None  # the client's bytes, spliced into the Decode's body
        kv = {"do_remote_decode": False, "do_remote_prefill": True, "metaserver": flow.layerwise.url}
        payload = decode_body(raw, body, kv, self.fast)
        attempt = 0
        while True:
            # both roles checked before anything is sent: the Decode would take the request and wait for KV
            if not prefill.can_pick():
                raise prefill.exhausted()
            if not decode.can_pick():
                raise decode.exhausted()
            handoff = flow.layerwise.expect(self, body, rid if attempt == 0 else f"{rid}-r{attempt}")
            try:
                return await self.decode_with(handoff, payload, use)
            except NeedPrefill as exc:
                attempt += 1
                if decode.attempts > max_retries or prefill.attempts > max_retries:
                    raise self.retries_spent(str(exc)) from None
            finally:
                flow.layerwise.forget(handoff)

    async def decode_with(self, handoff: Handoff, payload: bytes, use):
        """The Decode leg, ended early when the Prefill leg fails: the Decode would wait for KV that never comes."""

        async def after_head(lease, dconn):
            await self.prefilled(handoff)
            p, tokens = self.decode_leg.kv_from
            self.flow.metrics.edge(p.addr, lease.backend.addr, tokens)
            return await use(lease, dconn)

        leg = self.flow.loop.create_task(self.decode_leg.serve(self, payload, handoff.rid, after_head))
        try:
            await asyncio.wait((leg, handoff.settled), return_when=asyncio.FIRST_COMPLETED)
            if not leg.done() and handoff.settled.result() is not None:
                raise handoff.settled.result()
            return await leg
        finally:
            if not leg.done():
                leg.cancel()

    async def prefilled(self, handoff: Handoff):
        """Until the Prefill has pushed: the Decode may answer its head before (vLLM opens a stream at once)."""
        if not handoff.settled.done():
            try:
                await asyncio.wait_for(asyncio.shield(handoff.settled), self.first_byte_timeout())
            except TimeoutError:
                raise Answer(504, f"no Prefill pushed KV for {handoff.request_id} within the first-byte timeout "
                                  f"(did the Decode call {self.flow.layerwise.url}?)", "GatewayTimeoutError",
                             "prefill_timeout") from None
        failure = handoff.settled.result()
        if failure is not None:
            raise failure

    async def prefill_for(self, handoff: Handoff, params: dict, fast: bool):
        """The Prefill leg one metaserver call starts: the request with the Decode's params, one token."""
        metrics = self.flow.metrics
        t0 = time.perf_counter()
        outcome = Answer(502, f"internal proxy error in the Prefill leg of {handoff.rid}", "BadGatewayError",
                         "prefill_garbage")
        try:
            p, tokens = await self.prefill_leg.serve(self, prefill_body(handoff.body, self.fast and fast, params),
                                                     handoff.rid)
            metrics.observe(metrics.prefill_duration, self.endpoint, time.perf_counter() - t0)
            self.decode_leg.kv_from = (p, tokens)
            outcome = None
        except Answer as ans:
            outcome = ans
        finally:
            handoff.settle(outcome)
