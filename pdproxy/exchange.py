"""One client request through the PD flow: Prefill leg (max_tokens=1) -> kv_transfer_params -> Decode leg,
whose answer goes back to the client (streamed as it comes, or whole), continued after a recompute.

Retries (legs.py): a Prefill failure moves to another Prefill; a Decode that cannot be reached moves to another
Decode with the same kv_transfer_params; a Decode that got the request and failed may have consumed the KV, so
the next attempt re-runs Prefill too. Nothing is retried once a byte has gone to the client; a broken stream
ends with an SSE error event. Backend 4xx answers are passed through as they are (status and body).
"""

from __future__ import annotations

import os
import time

from .errors import Answer, gateway_failure
from .http_client import BackendError
from .leg_bodies import decode_body, prefill_body
from .legs import DECODE, PREFILL, Leg, NeedPrefill
from .sse_pipe import SsePipe


class Exchange:
    """One client request going through the PD flow."""

    __slots__ = ("flow", "req", "conn", "endpoint", "body", "stream", "rid", "hkey", "session", "load",
                 "deadline", "prefill_leg", "decode_leg", "ttft_seen", "auth", "path", "fast", "kv_fast",
                 "served")

    def __init__(self, flow, req, conn, endpoint: str, body: dict, fast: bool = False):
        self.flow = flow
        self.req = req
        self.conn = conn
        self.endpoint = endpoint
        self.path = endpoint.encode()
        self.body = body
        self.fast = fast  # body (and bodies derived from it) may be written by orjson
        self.kv_fast = False
        self.stream = bool(body.get("stream"))
        self.rid = req.headers.get("x-request-id") or os.urandom(16).hex()
        cfg = flow.cfg
        self.session = req.headers.get(cfg.sticky_header) if cfg.sticky_header else None
        self.hkey = flow.hash_key(req, body)
        self.load = 1.0 + len(req.body) / 4096.0  # least_conn's weight of this request: ~ prompt tokens
        self.deadline = req.t0 + cfg.total_timeout
        prompt = body if flow.prompt_roles else None  # cache_aware routes by the prompt itself (its text, its tokens)
        self.prefill_leg = Leg(flow.pools["prefill"], flow.balancers["prefill"], PREFILL,
                               prompt if "prefill" in flow.prompt_roles else self.hkey)
        self.decode_leg = Leg(flow.pools["decode"], flow.balancers["decode"], DECODE,
                              prompt if "decode" in flow.prompt_roles else self.hkey)
        self.ttft_seen = False
        self.served = None  # the answer's headers once its Decode answered: request id, Prefill, Decode, retries
        auth = req.headers.get("authorization")
        # the legs' Authorization: the client's, else --backend-api-key's (or $OPENAI_API_KEY's)
        self.auth = auth.encode("latin-1") if auth else flow.backend_auth

    def remaining(self) -> float:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise self.timed_out()
        return left

    def first_byte_timeout(self) -> float:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise self.timed_out()
        return min(self.flow.cfg.first_byte_timeout, left)

    def timed_out(self) -> Answer:
        return Answer(504, f"request exceeded the total timeout of {self.flow.cfg.total_timeout:g}s",
                      "TimeoutError", "timeout")

    def rid_header(self):
        return [(b"X-Request-Id", self.rid.encode())]

    def served_headers(self, decode) -> list:
        """The answer's headers once `decode` answered 2xx: the request id, which Prefill (whose KV it carries) and
        which Decode served it, and how many legs were retried on another instance (pdproxy/README.md)."""
        prefill = self.decode_leg.kv_from[0]
        retries = self.prefill_leg.attempts + self.decode_leg.attempts - 2
        self.served = [(b"X-Request-Id", self.rid.encode()), (b"X-PD-Prefill", prefill.host_header),
                       (b"X-PD-Decode", decode.host_header), (b"X-PD-Retries", b"%d" % retries)]
        return self.served

    def mark_first_byte(self):
        if not self.ttft_seen:
            self.ttft_seen = True
            self.flow.metrics.observe(self.flow.metrics.ttft, self.endpoint, time.perf_counter() - self.req.t0)

    # the legs
    async def through_pd(self, body: dict, rid: str, use):
        """Prefill then Decode, with retries. use(lease, decode_connection) reads the Decode's answer while
        that Decode is still leased; its result is returned."""
        max_retries = self.flow.cfg.max_retries
        metrics = self.flow.metrics
        prefill, decode = self.prefill_leg, self.decode_leg
        raw = self.req.body if body is self.body else None  # the client's bytes, spliced into the Decode's body
        attempt = 0
        while True:
            leg_rid = rid if attempt == 0 else f"{rid}-r{attempt}"
            # a Prefill run answers with its own last failure; the Decode's outlives re-prefills
            prefill.last = None
            if not decode.can_pick():  # no Prefill work (and no KV left behind) for a Decode nobody could take
                raise decode.exhausted()
            t0 = time.perf_counter()
            p, kv, tokens = await prefill.serve(self, prefill_body(body, self.fast), leg_rid)
            metrics.observe(metrics.prefill_duration, self.endpoint, time.perf_counter() - t0)
            decode.kv_from = (p, tokens)
            payload = decode_body(raw, body, kv, self.fast and self.kv_fast)
            try:
                return await decode.serve(self, payload, leg_rid, use)
            except NeedPrefill as exc:
                attempt += 1
                if decode.attempts > max_retries or prefill.attempts > max_retries:
                    raise self.retries_spent(str(exc)) from None

    def retries_spent(self, last: str) -> Answer:
        timeout = self.decode_leg.last is not None and self.decode_leg.last[1] == "timeout"
        status, err_type = gateway_failure("timeout" if timeout else "5xx")
        return Answer(status, f"no decode instance could serve the request; last error: {last}", err_type,
                      "decode_timeout" if timeout else "decode_5xx")

    # the answer
    async def run(self):
        """The whole request. The Decode's answer is streamed, or read whole, while that Decode is leased
        (forward); a whole answer is sent, and a recomputed stream continued, once it has been released."""
        try:
            answer = await self.through_pd(self.body, self.rid, self.forward)
        except Answer as ans:
            self.flow.metrics.error(ans.cause)
            if ans.body is not None:
                self.conn.send_response(ans.status, ans.body, ans.content_type, self.rid_header())
            else:
                self.conn.send_error(ans.status, ans.message, ans.err_type, self.rid_header())
            return
        if answer.__class__ is SsePipe:
            if answer.recomputed is not None:
                await self.flow.recompute.stream(self, self.body, answer.kept, answer.recomputed, 0)
            self.conn.end_stream()  # when no continuation did
        elif answer is not None:
            raw, ctype = answer
            if self.flow.cfg.recompute and b"recomputed" in raw:
                raw = await self.flow.recompute.whole(self, raw)
            self.mark_first_byte()
            self.conn.send_response(200, raw, ctype, self.served or self.rid_header())

    async def forward(self, lease, dconn):
        """The first Decode's answer while it is leased: its events streamed to the client (returns the
        SsePipe), or its body read whole (returns (body, content type)). None: it broke off, the client has
        been told."""
        ctype = dconn.headers.get("content-type", b"application/json")
        served = self.served_headers(lease.backend)
        if self.stream and ctype.startswith(b"text/event-stream"):
            self.conn.start_stream(200, ctype, served)
            return await self.pipe(lease, dconn)
        try:
            raw = await dconn.read_body(self.remaining())
            lease.done()
            return raw, ctype
        except BackendError as exc:
            d = lease.backend
            self.flow.pools["decode"].report_failure(d, exc)
            self.flow.metrics.error("decode_" + exc.kind)
            status, err_type = gateway_failure(exc.kind)
            self.conn.send_error(status, f"decode {d.addr} failed mid-answer: {exc.reason}", err_type,
                                 self.rid_header())
            return None

    # `use` callbacks of through_pd that only hand back a coroutine (no coroutine of their own on the hot path)
    def pipe(self, lease, dconn):
        """The Decode's SSE events to the client: the SsePipe, or None when the stream broke."""
        return SsePipe(self, dconn, self.flow.recompute if self.flow.cfg.recompute else None).run(lease)

    def read_rest(self, lease, dconn):
        """The Decode's body, read whole."""
        return lease.read_whole(self.remaining())
