"""The PD request flow through the proxy against real backend processes."""

import json

import pytest

from tests.pdproxy.proxy_procs import completion, request, sse_events

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_non_streaming_completion_goes_prefill_then_decode_with_kv_params(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    status, headers, raw = proxy.post("/v1/completions", completion(max_tokens=5),
                                      {"X-Request-Id": "req-abc"})
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["choices"][0]["text"] == "t0 t1 t2 t3 t4 "
    assert headers["x-request-id"] == "req-abc"
    [pre] = p.stats()["requests"]
    [dec] = d.stats()["requests"]
    assert pre["kv_transfer_params"] == {"do_remote_decode": True, "do_remote_prefill": False,
                                         "remote_engine_id": None, "remote_block_ids": None,
                                         "remote_host": None, "remote_port": None}
    assert (pre["max_tokens"], pre["min_tokens"], pre["stream"]) == (1, 1, False)
    # Decode got the original request plus what Prefill returned
    assert dec["max_tokens"] == 5
    assert dec["kv_transfer_params"]["remote_engine_id"] == "p1"
    assert dec["kv_transfer_params"]["remote_port"] == p.port
    assert dec["kv_transfer_params"]["do_remote_prefill"] is True
    assert pre["request_id"] == dec["request_id"] == "req-abc"


def test_prefill_leg_drops_stream_options_and_caps_max_completion_tokens(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi there"}], "stream": True,
            "max_completion_tokens": 7, "stream_options": {"include_usage": True}}
    status, _, raw = proxy.post("/v1/chat/completions", body)
    assert status == 200
    [pre] = p.stats()["requests"]
    [dec] = d.stats()["requests"]
    assert pre["max_completion_tokens"] == 1 and not pre["has_stream_options"] and pre["stream"] is False
    assert dec["max_completion_tokens"] == 7 and dec["has_stream_options"] and dec["stream"] is True
    assert pre["request_id"] == dec["request_id"] and pre["request_id"]
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"]["content"] for e in events[:-1]) == "".join(
        f"t{i} " for i in range(7))


def test_stream_passes_every_chunk_in_order(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1", chunks=200)
    proxy = cluster.proxy([p], [d])
    for _ in range(3):
        status, headers, raw = proxy.post("/v1/completions", completion(stream=True, max_tokens=200))
        assert status == 200
        assert headers["content-type"].startswith("text/event-stream")
        assert headers.get("transfer-encoding") == "chunked"
        events = sse_events(raw)
        assert events[-1] == "[DONE]"
        assert [e["seq"] for e in events[:-1]] == list(range(200))
        assert [e["choices"][0]["text"] for e in events[:-1]] == [f"t{i} " for i in range(200)]


def test_stream_is_forwarded_as_it_comes_not_buffered(cluster):
    import http.client
    import time

    p, d = cluster.backend("p1"), cluster.backend("d1", chunks=10, token_delay=0.2)
    proxy = cluster.proxy([p], [d])
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(completion(stream=True, max_tokens=10)),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = resp.read1(65536)
    t_first = time.monotonic() - t0
    rest = resp.read()
    t_all = time.monotonic() - t0
    conn.close()
    assert b"t0 " in first
    assert t_first < 0.6 and t_all > 1.5, (t_first, t_all)
    assert sse_events(first + rest)[-1] == "[DONE]"


def test_models_and_health(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    status, _, raw = request("GET", proxy.url + "/v1/models")
    assert status == 200 and json.loads(raw)["data"][0]["id"] == "fake-model"
    status, _, raw = request("GET", proxy.url + "/health")
    assert status == 200
    assert json.loads(raw)["prefill_instances"] == 1


def test_malformed_json_is_400_with_reason(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    status, _, raw = proxy.post("/v1/completions", b'{"model": "fake-model", "prompt": ')
    assert status == 400
    err = json.loads(raw)["error"]
    assert "malformed JSON" in err["message"] and err["code"] == 400
    status, _, raw = proxy.post("/v1/completions", b"[1, 2]")
    assert status == 400 and "JSON object" in json.loads(raw)["error"]["message"]
    assert p.stats()["counts"]["prefill"] == 0


def test_unknown_model_is_404_as_vllm_answers(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    status, _, raw = proxy.post("/v1/completions", completion(model="nope"))
    assert status == 404
    err = json.loads(raw)["error"]
    assert err["type"] == "NotFoundError" and "nope" in err["message"]
    assert d.stats()["counts"]["decode"] == 0


def test_unknown_route_and_method(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    assert request("GET", proxy.url + "/nowhere")[0] == 404
    assert request("GET", proxy.url + "/v1/completions")[0] == 405


def test_garbage_http_from_client_is_400_not_a_traceback(cluster):
    import socket

    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    s.sendall(b"NOT HTTP\x00\x01\r\n\r\n")
    data = s.recv(65536)
    s.close()
    assert data.startswith(b"HTTP/1.1 400")
    assert b"Traceback" not in data
