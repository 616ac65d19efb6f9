"""vLLM's Prefill/Decode request flow: Prefill leg (max_tokens=1) -> kv_transfer_params -> Decode leg streamed back.

Retries: a Prefill failure moves to another Prefill; a Decode that cannot be reached moves to another Decode
with the same kv_transfer_params; a Decode that answered 5xx may have consumed the KV, so the next attempt
re-runs Prefill too. Nothing is retried once a byte has gone to the client; a broken stream ends with an
SSE error event. Backend 4xx answers are passed through as they are (status and body).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from .backend_pool import Backend, BackendPool
from .errors import Answer, error_body, sse_error_event
from .http_client import BackendError, build_request
from .jsonfast import dumps, loads
from .recompute import Recompute

log = logging.getLogger("pdproxy.flow")

PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}


class NeedPrefill(Exception):
    """The Decode answered after possibly pulling the KV; the next attempt needs a fresh Prefill."""


def prefill_body(body: dict, fast: bool = False) -> bytes:
    """`fast`: body came from orjson (see jsonfast.dumps)."""
    pb = dict(body)
    pb["kv_transfer_params"] = PREFILL_KV
    pb["stream"] = False
    pb["max_tokens"] = 1
    pb["min_tokens"] = 1
    if "max_completion_tokens" in pb:
        pb["max_completion_tokens"] = 1
    pb.pop("stream_options", None)
    return dumps(pb, fast)


_WS = b" \t\r\n"


def decode_body(raw: bytes | None, body: dict, kv: dict, fast: bool = False) -> bytes:
    """The Decode leg's body: the request plus kv_transfer_params.

    When `raw` (the client's bytes, which parsed to `body`) is a plain JSON object without that key, the key
    is appended before its closing brace: no second serialisation of a body that can hold a long prompt, and
    the client's bytes reach Decode untouched. Otherwise (the client sent kv_transfer_params itself, or the
    bytes are not UTF-8 framed by braces) the parsed body is re-serialised with the key replaced."""
    if raw is not None and "kv_transfer_params" not in body:
        end = len(raw) - 1
        while end > 0 and raw[end] in _WS:
            end -= 1
        start = 0
        while start < end and raw[start] in _WS:
            start += 1
        if raw[start:start + 1] == b"{" and raw[end:end + 1] == b"}":
            sep = b', "kv_transfer_params": ' if body else b'"kv_transfer_params": '
            return b"%b%b%b}" % (raw[:end], sep, dumps(kv, fast))
    dbody = dict(body)
    dbody["kv_transfer_params"] = kv
    return dumps(dbody, fast)


def prompt_text(body: dict) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    parts = []
    for m in body.get("messages") or ():
        if isinstance(m, dict):
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return "\n".join(parts)


def _snippet(body: bytes, n: int = 200) -> str:
    text = body[:n].decode("utf-8", "replace")
    return text + ("..." if len(body) > n else "")


class Exchange:
    """One client request going through the PD flow."""

    __slots__ = ("flow", "req", "conn", "endpoint", "body", "stream", "rid", "hkey", "session", "load",
                 "deadline", "bad_p", "bad_d", "p_attempts", "d_attempts", "ttft_seen", "auth", "path",
                 "d_last", "fast", "kv_fast")

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
        self.load = 1.0 + len(req.body) / 4096.0
        self.deadline = req.t0 + cfg.total_timeout
        self.bad_p: set = set()
        self.bad_d: set = set()
        self.p_attempts = 0
        self.d_attempts = 0
        self.ttft_seen = False
        self.d_last = None  # (reason, kind) of the last Decode failure, across re-prefills
        auth = req.headers.get("authorization")
        self.auth = auth.encode("latin-1") if auth else flow.backend_auth

    def remaining(self) -> float:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise Answer(504, f"request exceeded the total timeout of {self.flow.cfg.total_timeout:g}s",
                         "TimeoutError", "timeout")
        return left

    def headers(self, rid: str) -> list:
        h = [(b"X-Request-Id", rid.encode())]
        if self.auth:
            h.append((b"Authorization", self.auth))
        return h

    # one leg to one backend, answer read whole
    async def call(self, b: Backend, payload: bytes, rid: str) -> tuple[int, dict, bytes]:
        flow = self.flow
        b.inflight += 1
        b.inflight_load += self.load
        b.requests += 1
        try:
            data = build_request(b"POST", self.path, b.host_header, payload, self.headers(rid))
            for fresh_try in (0, 1):
                conn, reused = await b.take_connection(flow.loop, flow.cfg.connect_timeout)
                try:
                    conn.send(data, min(flow.cfg.first_byte_timeout, self.remaining()))
                    await conn.read_head()
                    body = await conn.read_body(self.remaining())
                except BackendError as exc:
                    conn.close()
                    if reused and not exc.started and exc.kind == "reset" and not fresh_try:
                        continue  # the backend closed an idle keep-alive connection: not its fault
                    raise
                except BaseException:
                    conn.close()
                    raise
                b.return_connection(conn)
                return conn.status, conn.headers, body
            raise AssertionError("unreachable")
        finally:
            b.inflight -= 1
            b.inflight_load -= self.load

    async def prefill(self, body: dict, rid: str) -> tuple[Backend, dict, int]:
        flow = self.flow
        pool = flow.pools["prefill"]
        payload = prefill_body(body, self.fast)
        last = None
        last_kind = ""
        t0 = time.perf_counter()
        while self.p_attempts <= flow.cfg.max_retries:
            b = flow.pick("prefill", self, self.bad_p)
            if b is None:
                break
            if self.p_attempts:
                flow.metrics.retry("prefill")
            self.p_attempts += 1
            try:
                status, _headers, raw = await self.call(b, payload, rid)
            except BackendError as exc:
                self.bad_p.add(b)
                pool.report_failure(b, exc)
                flow.metrics.backend("prefill", b.addr, exc.kind)
                last, last_kind = f"prefill {b.addr}: {exc.reason}", exc.kind
                continue
            if status >= 500:
                self.bad_p.add(b)
                pool.report_failure(b, status=status)
                flow.metrics.backend("prefill", b.addr, "5xx")
                last, last_kind = f"prefill {b.addr} answered HTTP {status}: {_snippet(raw)}", "5xx"
                continue
            if status >= 400:
                flow.metrics.backend("prefill", b.addr, "4xx")
                raise Answer(status, "", "", "prefill_4xx", body=raw, content_type=_headers.get(
                    "content-type", b"application/json"))
            try:
                answer, self.kv_fast = loads(raw)
                kv = answer["kv_transfer_params"]
                if not isinstance(kv, dict):
                    raise TypeError("kv_transfer_params is not an object")
            except (ValueError, KeyError, TypeError) as exc:
                self.bad_p.add(b)
                err = BackendError("garbage", f"prefill {b.addr} answered 200 without usable "
                                   f"kv_transfer_params ({type(exc).__name__}: {exc}): {_snippet(raw)}")
                pool.report_failure(b, status=502)
                flow.metrics.backend("prefill", b.addr, "garbage")
                last, last_kind = err.reason, "garbage"
                continue
            pool.report_success(b)
            flow.metrics.backend("prefill", b.addr, "ok")
            flow.metrics.observe(flow.metrics.prefill_duration, self.endpoint, time.perf_counter() - t0)
            usage = answer.get("usage") or {}
            tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else 0
            return b, kv, tokens if isinstance(tokens, int) else 0
        if last is None:
            raise Answer(503, pool.why_unavailable(), "ServiceUnavailableError", "no_prefill")
        status = 504 if last_kind == "timeout" else 502
        raise Answer(status, f"no prefill instance could serve the request; last error: {last}",
                     "BadGatewayError" if status == 502 else "GatewayTimeoutError", f"prefill_{last_kind}")

    async def decode_open(self, body: dict, kv: dict, p: Backend, prompt_tokens: int, rid: str):
        """Send the Decode leg; return (backend, connection) once a Decode answered 2xx."""
        flow = self.flow
        pool = flow.pools["decode"]
        payload = None
        while self.d_attempts <= flow.cfg.max_retries:
            b = flow.pick("decode", self, self.bad_d)
            if b is None:
                break
            if self.d_attempts:
                flow.metrics.retry("decode")
            self.d_attempts += 1
            if payload is None:
                payload = decode_body(self.req.body if body is self.body else None, body, kv,
                                      self.fast and self.kv_fast)
            data = build_request(b"POST", self.path, b.host_header, payload, self.headers(rid))
            b.inflight += 1
            b.inflight_load += self.load
            b.requests += 1
            conn = None
            try:
                for fresh_try in (0, 1):
                    conn, reused = await b.take_connection(flow.loop, flow.cfg.connect_timeout)
                    try:
                        conn.send(data, min(flow.cfg.first_byte_timeout, self.remaining()))
                        await conn.read_head()
                        break
                    except BackendError as exc:
                        conn.close()
                        if reused and not exc.started and exc.kind == "reset" and not fresh_try:
                            continue
                        raise
            except BackendError as exc:
                b.inflight -= 1
                b.inflight_load -= self.load
                self.bad_d.add(b)
                pool.report_failure(b, exc)
                flow.metrics.backend("decode", b.addr, exc.kind)
                self.d_last = (f"decode {b.addr}: {exc.reason}", exc.kind)
                if exc.kind != "connect":
                    # it got the request, so it may have pulled (and freed) the KV before failing
                    raise NeedPrefill(self.d_last[0]) from None
                continue
            except BaseException:
                b.inflight -= 1
                b.inflight_load -= self.load
                if conn is not None:
                    conn.close()
                raise
            status = conn.status
            if status >= 400:
                try:
                    raw = await conn.read_body(min(5.0, self.remaining()))
                    b.return_connection(conn)
                except BackendError:
                    conn.close()
                    raw = b""
                finally:
                    b.inflight -= 1
                    b.inflight_load -= self.load
                if status >= 500:
                    # not excluded: a Decode's 5xx is often the Prefill's fault (it died holding the KV);
                    # the re-prefill may use any Decode, within the retry budget
                    pool.report_failure(b, status=status)
                    flow.metrics.backend("decode", b.addr, "5xx")
                    self.d_last = (f"decode {b.addr} answered HTTP {status}: {_snippet(raw)}", "5xx")
                    raise NeedPrefill(self.d_last[0])
                flow.metrics.backend("decode", b.addr, "4xx")
                raise Answer(status, "", "", "decode_4xx", body=raw,
                             content_type=conn.headers.get("content-type", b"application/json"))
            pool.report_success(b)
            flow.metrics.backend("decode", b.addr, "ok")
            flow.metrics.edge(p.addr, b.addr, prompt_tokens)
            return b, conn
        if self.d_last is None:
            raise Answer(503, pool.why_unavailable(), "ServiceUnavailableError", "no_decode")
        last, last_kind = self.d_last
        raise Answer(504 if last_kind == "timeout" else 502,
                     f"no decode instance could serve the request; last error: {last}",
                     "BadGatewayError", f"decode_{last_kind}")

    async def open_pd(self, body: dict, rid: str):
        """Prefill then Decode, with retries; returns (decode backend, open decode connection)."""
        flow = self.flow
        attempt = 0
        last = ""
        while True:
            leg_rid = rid if attempt == 0 else f"{rid}-r{attempt}"
            p, kv, tokens = await self.prefill(body, leg_rid)
            try:
                return await self.decode_open(body, kv, p, tokens, leg_rid)
            except NeedPrefill as exc:
                last = str(exc)
                attempt += 1
                if self.d_attempts > flow.cfg.max_retries or self.p_attempts > flow.cfg.max_retries:
                    timeout = self.d_last is not None and self.d_last[1] == "timeout"
                    raise Answer(504 if timeout else 502,
                                 f"no decode instance could serve the request; last error: {last}",
                                 "GatewayTimeoutError" if timeout else "BadGatewayError",
                                 "decode_timeout" if timeout else "decode_5xx") from None

    # the whole request
    async def run(self):
        conn = self.conn
        try:
            d, dconn = await self.open_pd(self.body, self.rid)
        except Answer as ans:
            self.flow.metrics.error(ans.cause)
            if ans.body is not None:
                conn.send_response(ans.status, ans.body, ans.content_type, self.rid_header())
            else:
                conn.send_error(ans.status, ans.message, ans.err_type, self.rid_header())
            return
        ctype = dconn.headers.get("content-type", b"application/json")
        if self.stream and ctype.startswith(b"text/event-stream"):
            conn.start_stream(200, ctype, self.rid_header())
            await self.pipe(d, dconn, self.body, 0)
            conn.end_stream()
        else:
            await self.whole(d, dconn, ctype)

    def rid_header(self):
        return [(b"X-Request-Id", self.rid.encode())]

    def mark_first_byte(self):
        if not self.ttft_seen:
            self.ttft_seen = True
            self.flow.metrics.observe(self.flow.metrics.ttft, self.endpoint, time.perf_counter() - self.req.t0)

    async def whole(self, d: Backend, dconn, ctype: bytes):
        flow = self.flow
        try:
            try:
                raw = await dconn.read_body(self.remaining())
                d.return_connection(dconn)
            except BackendError as exc:
                dconn.close()
                flow.pools["decode"].report_failure(d, exc)
                flow.metrics.error("decode_" + exc.kind)
                self.conn.send_error(504 if exc.kind == "timeout" else 502,
                                     f"decode {d.addr} failed mid-answer: {exc.reason}", "BadGatewayError",
                                     self.rid_header())
                return
            except Answer as ans:
                dconn.close()
                flow.metrics.error(ans.cause)
                self.conn.send_error(ans.status, ans.message, ans.err_type, self.rid_header())
                return
            except BaseException:
                dconn.close()
                raise
        finally:
            d.inflight -= 1
            d.inflight_load -= self.load
        if flow.cfg.recompute and b"recomputed" in raw:
            raw = await flow.recompute.whole(self, raw)
        self.mark_first_byte()
        self.conn.send_response(200, raw, ctype, self.rid_header())

    async def pipe(self, d: Backend, dconn, body: dict, depth: int):
        """Forward the Decode's SSE events as they come (complete events only, bytes untouched)."""
        flow = self.flow
        client = self.conn
        sp = _SsePipe(self, dconn, flow.recompute if flow.cfg.recompute else None)
        try:
            done = dconn.attach_sink(sp.sink, sp.flush)
            sp.flush()  # whatever came with the Decode's head
            dconn.arm(self.deadline - time.perf_counter(), "end of stream (total timeout)")
            try:
                await done
                if sp.recomputed is None:
                    # the last events, a trailing partial event and the end of the stream: one write
                    out = sp.out
                    if sp.pending:
                        out.append(sp.pending)
                    client.end_stream(b"".join(out))
                    out.clear()
                else:
                    sp.flush()
                d.return_connection(dconn)
            except BackendError as exc:
                dconn.close()
                flow.pools["decode"].report_failure(d, exc)
                flow.metrics.error("stream_broken")
                sp.out.append(sse_error_event(502, f"decode {d.addr} stream broke: {exc.reason}",
                                              "BadGatewayError"))
                client.end_stream(b"".join(sp.out))
                return
            except BaseException:
                dconn.close()
                raise
        finally:
            d.inflight -= 1
            d.inflight_load -= self.load
        if sp.recomputed is not None:
            await flow.recompute.stream(self, body, sp.kept, sp.recomputed, depth)


class _SsePipe:
    """Decode SSE bytes -> client, whole events only. sink() runs for each body piece the parser yields;
    flush() runs once per network read (ClientConnection's after_feed), so the events one read brought leave
    in one write. A class rather than closures over a state dict: no per-stream dict and fewer cell lookups."""

    __slots__ = ("ex", "client", "dconn", "recompute", "kept", "pending", "recomputed", "out")

    def __init__(self, ex: Exchange, dconn, recompute):
        self.ex = ex
        self.client = ex.conn
        self.dconn = dconn
        self.recompute = recompute  # None: recompute continuation is off
        self.kept: list[bytes] = []
        self.pending = b""
        self.recomputed = None
        self.out: list[bytes] = []

    def sink(self, data: bytes):
        if self.recomputed is not None:
            return
        if self.pending:
            data = self.pending + data
            self.pending = b""
        if not data.endswith(b"\n\n"):
            cut = data.rfind(b"\n\n")
            if cut < 0:
                self.pending = data
                return
            self.pending = data[cut + 2:]
            data = data[:cut + 2]
        if self.recompute is not None:
            if b"recomputed" in data:
                data, event = self.recompute.split_at_recomputed(data)
                self.recomputed = event
                if not data:
                    return
            self.kept.append(data)
        ex = self.ex
        if not ex.ttft_seen:
            ex.mark_first_byte()
        self.out.append(data)

    def flush(self):
        out = self.out
        if not out:
            return
        client = self.client
        client.send_chunk(out[0] if len(out) == 1 else b"".join(out))
        out.clear()
        if client.write_paused and not self.dconn.closed:
            self.dconn.pause_reading()
            client.on_resume(self.resume)

    def resume(self):
        if not self.dconn.closed:
            self.dconn.resume_reading()


class PDFlow:
    def __init__(self, cfg, pools: dict[str, BackendPool], balancers: dict, metrics):
        self.cfg = cfg
        self.pools = pools
        self.balancers = balancers
        self.metrics = metrics
        self.loop = asyncio.get_event_loop()
        key = cfg.backend_api_key or os.environ.get("OPENAI_API_KEY")
        self.backend_auth = f"Bearer {key}".encode() if key else None
        self.recompute = Recompute(self)

    def hash_key(self, req, body: dict) -> str | None:
        k = self.cfg.hash_key
        if k == "request_id":
            return req.headers.get("x-request-id")
        if k == "user":
            user = body.get("user")
            return str(user) if user is not None else None
        if k == "client_ip":
            return req.client_ip
        return prompt_text(body)[: self.cfg.prefix_chars]

    def pick(self, role: str, ex: Exchange, exclude) -> Backend | None:
        return self.balancers[role].pick(ex.hkey, exclude, ex.session)

    async def generate(self, req, conn, endpoint: str):
        try:
            body, fast = loads(req.body)
        except (ValueError, UnicodeDecodeError) as exc:
            self.metrics.error("bad_request")
            conn.send_error(400, f"malformed JSON body: {exc}", "BadRequestError")
            return
        if not isinstance(body, dict):
            self.metrics.error("bad_request")
            conn.send_error(400, "the request body must be a JSON object", "BadRequestError")
            return
        await Exchange(self, req, conn, endpoint, body, fast).run()

    async def models(self, req, conn):
        """Forwarded to the first healthy instance that answers (Decode first, then Prefill)."""
        last = None
        for role in ("decode", "prefill"):
            for b in self.pools[role].available():
                c = None
                try:
                    c, _ = await b.take_connection(self.loop, self.cfg.connect_timeout)
                    c.send(build_request(b"GET", b"/v1/models", b.host_header, b"", []), 10.0)
                    await c.read_head()
                    raw = await c.read_body(10.0)
                    b.return_connection(c)
                except BackendError as exc:
                    if c is not None:
                        c.close()
                    last = f"{role} {b.addr}: {exc.reason}"
                    continue
                if c.status >= 500:
                    last = f"{role} {b.addr} answered HTTP {c.status}"
                    continue
                conn.send_response(c.status, raw, c.headers.get("content-type", b"application/json"))
                return
        if last is None:
            conn.send_error(503, self.pools["decode"].why_unavailable() + "; "
                            + self.pools["prefill"].why_unavailable(), "ServiceUnavailableError")
        else:
            conn.send_error(502, f"no instance answered /v1/models; last error: {last}", "BadGatewayError")


__all__ = ["PDFlow", "Exchange", "Answer", "error_body"]
