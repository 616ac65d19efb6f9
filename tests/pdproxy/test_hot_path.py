"""The hot-path shortcuts keep the behaviour of what they replaced: local metrics render exactly as
prometheus_client's own objects, the Decode body splice says what a re-serialisation said, orjson keeps json's
accept set, a stream's head and end share writes without changing the bytes, the lazy timer still fires, and a
leg's request is the bytes the generic request builder makes."""

import asyncio
import json
import math

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest

from pdproxy.backend_pool import BackendPool
from pdproxy.http_client import BackendError, ClientConnection, build_post, build_request
from pdproxy.http_server import ServerConnection
from pdproxy.jsonfast import dumps, loads
from pdproxy.leg_bodies import decode_body, prefill_body
from pdproxy.limits import RequestCaps
from pdproxy.metrics import LATENCY_BUCKETS, Metrics

KV = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "p", "remote_block_ids": [1, 2],
      "remote_host": "127.0.0.1", "remote_port": 7, "remote_request_id": "r"}


def test_local_metrics_render_like_prometheus_client_objects():
    pools = [BackendPool("prefill"), BackendPool("decode")]
    m = Metrics(lambda: pools)
    disable_created_metrics()
    ref = CollectorRegistry()
    r_req = Counter("pdproxy_requests", "Client requests answered, by endpoint and status code",
                    ["endpoint", "code"], registry=ref)
    r_ttft = Histogram("pdproxy_time_to_first_token_seconds",
                       "Request arrival to first Decode byte forwarded to the client", ["endpoint"],
                       buckets=LATENCY_BUCKETS, registry=ref)
    r_edge = Counter("pdproxy_edge_prompt_tokens", "Prompt tokens whose KV went from this Prefill to this Decode",
                     ["prefill", "decode"], registry=ref)
    for code in (200, 200, 502):
        m.request("/v1/completions", code)
        r_req.labels("/v1/completions", str(code)).inc()
    # bucket bounds exactly (le means <=), between them, beyond the last one
    for v in (0.0005, 0.0007, 0.001, 2.5, 299.0, 300.0, 301.0, 0.0):
        m.observe(m.ttft, "/v1/chat/completions", v)
        r_ttft.labels("/v1/chat/completions").observe(v)
    m.edge("a:1", "b:2", 17)
    r_edge.labels("a:1", "b:2").inc(17)
    r_legs = Counter("pdproxy_backend_requests", "Legs sent to a backend, by outcome", ["role", "backend", "outcome"],
                     registry=ref)
    for outcome in ("ok", "ok", "5xx"):
        m.backend("prefill", "a:1", outcome)
        r_legs.labels("prefill", "a:1", outcome).inc()
    ours = generate_latest(m.registry).decode()
    theirs = generate_latest(ref).decode()
    for line in theirs.splitlines():
        if not line.startswith("#"):
            assert line in ours, line
    assert "pdproxy_edge_requests_total{decode=\"b:2\",prefill=\"a:1\"} 1.0" in ours
    assert "pdproxy_recomputes_total 0.0" in ours


def test_decode_body_splice_matches_reserialisation():
    body = {"model": "m", "prompt": "héllo \"q\" \\ ✓", "max_tokens": 5, "stream": True}
    for raw in (json.dumps(body).encode(), json.dumps(body, ensure_ascii=False).encode(),
                b"  \n" + json.dumps(body, indent=2).encode() + b"\r\n "):
        out = decode_body(raw, body, KV, fast=True)
        assert out.startswith(raw.rstrip()[:-1])  # the client's bytes, untouched
        assert json.loads(out) == dict(body, kv_transfer_params=KV)
    assert json.loads(decode_body(b"{}", {}, KV)) == {"kv_transfer_params": KV}
    # the client sent kv_transfer_params itself: replaced, not duplicated
    own = dict(body, kv_transfer_params={"x": 1})
    out = decode_body(json.dumps(own).encode(), own, KV)
    assert out.count(b"kv_transfer_params") == 1 and json.loads(out)["kv_transfer_params"] == KV
    # not UTF-8 framed by braces (UTF-16): re-serialised
    assert json.loads(decode_body(json.dumps(body).encode("utf-16"), body, KV)) == dict(body, kv_transfer_params=KV)


def test_json_keeps_the_json_module_accept_set_and_values():
    body, fast = loads(b'{"prompt": "x", "temperature": NaN, "seed": 123456789012345678901234567890}')
    assert not fast and math.isnan(body["temperature"]) and body["seed"] == 123456789012345678901234567890
    pb = json.loads(prefill_body(body, fast).replace(b"NaN", b"null"))
    assert pb["seed"] == 123456789012345678901234567890 and pb["max_tokens"] == 1
    assert b"NaN" in prefill_body(body, fast)  # what the json module wrote before
    body, fast = loads('{"prompt": "é"}'.encode("utf-16"))
    assert body == {"prompt": "é"} and not fast
    body, fast = loads(b'{"prompt": "\\u00e9", "max_tokens": 9, "stream_options": {}, "max_completion_tokens": 3}')
    assert fast
    assert json.loads(prefill_body(body, fast)) == {
        "prompt": "é", "max_tokens": 1, "min_tokens": 1, "max_completion_tokens": 1, "stream": False,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                               "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    assert json.loads(dumps({"s": "\ud800"}, True)) == {"s": "\ud800"}  # orjson refuses; json writes it
    for bad in (b"{bad", b"", b"\xff\xfe"):
        try:
            loads(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


class _Transport:
    def __init__(self):
        self.writes = []
        self.aborted = False

    def write(self, data):
        self.writes.append(bytes(data))

    def get_extra_info(self, name):
        return None

    def abort(self):
        self.aborted = True

    def close(self):
        self.aborted = True


def test_stream_head_and_end_share_writes_and_bytes_are_unchanged():
    async def go():
        c = ServerConnection(app=None, caps=RequestCaps(max_body_bytes=1000))
        t = _Transport()
        c.connection_made(t)
        c.start_stream(200, b"text/event-stream", [(b"X-Request-Id", b"r")])
        assert t.writes == []
        c.send_chunk(b"data: 1\n\n")
        c.send_chunk(b"data: 2\n\n")
        c.end_stream(b"data: [DONE]\n\n")
        c.end_stream()  # a second end is a no-op
        return t.writes

    writes = asyncio.run(go())
    assert len(writes) == 3
    head, rest = writes[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Transfer-Encoding: chunked" in head
    assert rest == b"9\r\ndata: 1\n\n\r\n"
    assert writes[2] == b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"

    async def empty():
        c = ServerConnection(app=None, caps=RequestCaps(max_body_bytes=1000))
        t = _Transport()
        c.connection_made(t)
        c.start_stream(200, b"text/event-stream")
        c.end_stream()
        return t.writes

    writes = asyncio.run(empty())
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200") and writes[0].endswith(b"\r\n\r\n0\r\n\r\n")


def test_lazy_timer_fires_at_the_shortest_live_deadline_and_not_after_disarm():
    async def go():
        loop = asyncio.get_running_loop()
        c = ClientConnection(loop)
        c.connection_made(_Transport())
        c.arm(300.0, "response")          # a long timer exists...
        c.send(b"GET / HTTP/1.1\r\n\r\n", 0.05)  # ...the request's shorter first-byte deadline replaces it
        t0 = loop.time()
        try:
            await asyncio.wait_for(c.read_head(), 60)
        except BackendError as exc:
            assert exc.kind == "timeout" and "0.05" in exc.reason
        else:
            raise AssertionError("no timeout")
        assert loop.time() - t0 < 30 and c.transport.aborted  # far from the long timer's 300 s, however loaded

        d = ClientConnection(loop)
        d.connection_made(_Transport())
        d.arm(0.05, "response")
        d.disarm()                        # finished in time: the pending timer must do nothing
        await asyncio.sleep(0.15)
        assert not d.transport.aborted and d.error is None
        d.arm(0.05, "complete body")      # re-armed later: the deadline moved, the timer follows it
        await asyncio.sleep(0.03)
        d.arm(3.0, "complete body")       # (3 s: a loaded machine's sleeps overshoot by far more than 0.1 s)
        await asyncio.sleep(0.3)          # the first timer has fired by now, found the deadline moved, and waits on
        assert not d.transport.aborted
        deadline = loop.time() + 30
        while not d.transport.aborted and loop.time() < deadline:
            await asyncio.sleep(0.05)
        assert d.transport.aborted and d.error.kind == "timeout"

    asyncio.run(go())


def test_a_legs_request_bytes_are_what_build_request_makes():
    for auth in (None, b"Bearer k"):
        for body in (b"", b'{"prompt": "x"}', b"x" * 70000):
            extra = [(b"X-Request-Id", b"r-1")] + ([(b"Authorization", auth)] if auth else [])
            assert build_post(b"/v1/completions", b"h:1", body, b"r-1", auth) == build_request(
                b"POST", b"/v1/completions", b"h:1", body, extra)
