"""Failures of every kind seen in the example proxy ("Where it fails"), each answered truthfully."""

import json
import time

import pytest

from tests.pdproxy.proxy_procs import completion, request, sse_events, wait_until

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def served_by(d_backends):
    return {b.name: b.stats()["counts"]["decode"] for b in d_backends}


def test_prefill_500_is_retried_on_another_prefill(cluster):
    p1, p2, d = cluster.backend("p1"), cluster.backend("p2"), cluster.backend("d1")
    proxy = cluster.proxy([p1, p2], [d], "--policy", "round_robin")
    p1.fault("500")
    for _ in range(6):
        status, _, raw = proxy.post("/v1/completions", completion())
        assert status == 200, raw
    # every decode got its KV from p2
    assert {r["kv_transfer_params"]["remote_engine_id"] for r in d.stats()["requests"]} == {"p2"}
    assert proxy.metric("pdproxy_retries_total", role="prefill") >= 1


def test_prefill_garbage_and_closed_port_are_retried_and_ejected(cluster):
    p1, p2, d = cluster.backend("p1"), cluster.backend("p2"), cluster.backend("d1")
    proxy = cluster.proxy([p1, p2], [d], "--policy", "round_robin", "--health-interval", "5")
    p1.fault("garbage")
    for _ in range(4):
        assert proxy.post("/v1/completions", completion())[0] == 200
    status, listing = proxy.admin("GET", "/instances")
    states = {i["address"]: i["state"] for i in listing["prefill"]}
    assert states[p1.addr] == "ejected"
    p1.kill()
    for _ in range(4):
        assert proxy.post("/v1/completions", completion())[0] == 200


def test_prefill_garbage_json_is_502_with_reason_when_no_other(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--max-retries", "0")
    p.fault("garbage_json")
    status, _, raw = proxy.post("/v1/completions", completion())
    assert status == 502
    msg = json.loads(raw)["error"]["message"]
    assert "kv_transfer_params" in msg and p.addr in msg


def test_prefill_params_without_the_remote_fields_never_reach_a_decode(cluster):
    """A real vLLM Decode given do_remote_prefill without remote_* dies (NixlConnector asserts; docs/real-engine.md):
    such an answer is a failed Prefill leg, retried on another Prefill, a 502 naming the fields when none is left."""
    p1, p2, d = cluster.backend("p1"), cluster.backend("p2"), cluster.backend("d1")
    alone = cluster.proxy([p1], [d], "--max-retries", "0")
    p1.fault("partial_kv", times=100)
    status, _, raw = alone.post("/v1/completions", completion())
    assert status == 502, raw
    message = json.loads(raw)["error"]["message"]
    assert "do_remote_prefill without remote_engine_id, remote_block_ids, remote_host, remote_port" in message
    assert p1.addr in message and d.stats()["counts"]["decode"] == 0
    retried = cluster.proxy([p1, p2], [d], "--policy", "round_robin")
    for _ in range(2):
        assert retried.post("/v1/completions", completion())[0] == 200
    assert d.stats()["counts"]["decode"] == 2


def test_decode_500_is_reported_or_retried_never_200_empty(cluster):
    p, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin")
    d1.fault("500")
    for stream in (False, True):
        status, _, raw = proxy.post("/v1/completions", completion(stream=stream))
        assert status == 200 and raw
    d2.fault("500")
    status, _, raw = proxy.post("/v1/completions", completion(stream=True))
    assert status == 502
    assert "HTTP 500" in json.loads(raw)["error"]["message"]


def test_decode_4xx_is_passed_through_truthfully(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    d.fault("400")
    for stream in (False, True):
        status, _, raw = proxy.post("/v1/completions", completion(stream=stream))
        assert status == 400
        assert json.loads(raw)["error"]["message"] == "injected bad request"


def test_decode_closed_port_fails_over_with_same_kv(cluster):
    p, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin", "--health-interval", "5")
    d1.kill()
    for _ in range(4):
        status, _, raw = proxy.post("/v1/completions", completion(stream=True))
        assert status == 200 and sse_events(raw)[-1] == "[DONE]"
    assert p.stats()["counts"]["prefill"] == 4  # the KV was reused, not prefilled again


def test_stream_cut_after_start_ends_with_sse_error_event(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1", chunks=17)
    proxy = cluster.proxy([p], [d])
    d.fault("cut_after", n=5)
    status, _, raw = proxy.post("/v1/completions", completion(stream=True, max_tokens=17))
    assert status == 200
    events = sse_events(raw)
    assert [e["seq"] for e in events[:5]] == list(range(5))
    assert "error" in events[5] and "stream broke" in events[5]["error"]["message"]
    assert events[-1] == "[DONE]"
    assert proxy.metric("pdproxy_errors_total", cause="stream_broken") == 1


def test_decode_that_never_answers_times_out(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--first-byte-timeout", "0.5", "--max-retries", "0")
    d.fault("hang")
    t0 = time.monotonic()
    status, _, raw = proxy.post("/v1/completions", completion(stream=True), timeout=10)
    assert status == 504, raw
    assert time.monotonic() - t0 < 3
    assert "0.5s" in json.loads(raw)["error"]["message"]


def test_total_timeout_bounds_a_slow_request(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1", chunks=50, token_delay=0.1)
    proxy = cluster.proxy([p], [d], "--total-timeout", "1")
    status, _, raw = proxy.post("/v1/completions", completion(stream=True, max_tokens=50), timeout=10)
    assert status == 200
    events = sse_events(raw)
    assert "error" in events[-2] and "timeout" in events[-2]["error"]["message"]


def test_slow_first_byte_prefill_moves_to_another(cluster):
    p1, p2, d = cluster.backend("p1"), cluster.backend("p2"), cluster.backend("d1")
    proxy = cluster.proxy([p1, p2], [d], "--policy", "round_robin", "--first-byte-timeout", "0.3")
    p1.fault("slow_first_byte", seconds=2)
    for _ in range(3):
        status, _, _ = proxy.post("/v1/completions", completion())
        assert status == 200


def test_no_healthy_backend_is_503_saying_why(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    d.kill()
    assert wait_until(lambda: request("GET", proxy.url + "/health")[0] == 503)
    status, _, raw = proxy.post("/v1/completions", completion())
    assert status == 503
    msg = json.loads(raw)["error"]["message"]
    assert "no healthy decode instance" in msg and d.addr in msg and "ejected" in msg


def test_ejected_backend_comes_back_when_healthy(cluster):
    p, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin")
    d1.fault("ok", health="fail")
    assert wait_until(lambda: proxy.metric("pdproxy_backend_healthy", backend=d1.addr) == 0)
    for _ in range(4):
        assert proxy.post("/v1/completions", completion())[0] == 200
    assert served_by([d1, d2]) == {"d1": 0, "d2": 4}
    d1.fault("ok", health="ok")
    assert wait_until(lambda: proxy.metric("pdproxy_backend_healthy", backend=d1.addr) == 1)
    for _ in range(4):
        assert proxy.post("/v1/completions", completion())[0] == 200
    assert served_by([d1, d2])["d1"] == 2


def test_a_decode_4xx_whose_body_comes_seconds_after_its_head_is_still_passed_through(cluster):
    """uvicorn writes an error's head and body apart: a loaded engine host once put more than the 5 s the proxy
    then allowed between them, and the client got a 400 with an empty body."""
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    d.fault("400_slow_body", seconds=5.5)
    status, _, raw = proxy.post("/v1/completions", completion())
    assert status == 400 and json.loads(raw)["error"]["message"] == "injected bad request", raw


def test_a_decode_4xx_whose_body_never_comes_gets_an_error_naming_the_decode(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    d.fault("400_cut_body")
    status, _, raw = proxy.post("/v1/completions", completion())
    error = json.loads(raw)["error"]
    assert status == 400 and error["type"] == "BadRequestError", raw
    assert f"decode {d.addr} answered HTTP 400: its body could not be read" in error["message"], raw


def test_a_decode_5xx_whose_body_stalls_still_fails_over_within_seconds(cluster):
    """A 5xx's body only names why the proxy fails over: it is given 5 s, not the request's whole budget."""
    p, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin", "--max-retries", "1")
    d1.fault("500_slow_body", seconds=60)
    d2.fault("500_slow_body", seconds=60)
    started = time.monotonic()
    status, _, raw = proxy.post("/v1/completions", completion(), timeout=60)
    waited = time.monotonic() - started
    assert status == 502 and "answered HTTP 500: its body could not be read" in json.loads(raw)["error"]["message"]
    assert waited < 30, f"the proxy waited {waited:.0f} s for 5xx bodies instead of failing over"
