"""Prometheus metrics: per-edge counters add up; the names the control plane scrapes exist."""

import concurrent.futures as cf
import json
import socket

import pytest

from tests.pdproxy.proxy_procs import completion, wait_until

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_edge_counters_add_up_to_requests_sent(cluster):
    ps = [cluster.backend(f"p{i}") for i in range(2)]
    ds = [cluster.backend(f"d{i}") for i in range(2)]
    proxy = cluster.proxy(ps, ds, "--policy", "round_robin")
    with cf.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: proxy.post("/v1/completions",
                                                     completion(prompt="a b c d", stream=i % 2 == 0)),
                                range(20)))
    assert all(r[0] == 200 for r in results)
    total = 0
    for p in ps:
        for d in ds:
            n = proxy.metric("pdproxy_edge_requests_total", prefill=p.addr, decode=d.addr)
            total += n
            # the KV of each request was 4 prompt tokens, as Prefill reported them
            assert proxy.metric("pdproxy_edge_prompt_tokens_total", prefill=p.addr, decode=d.addr) == 4 * n
            # what the proxy counts is what the backends saw: d's requests whose KV came from p
            seen = sum(1 for r in d.stats()["requests"] if r["kv_transfer_params"]["remote_engine_id"] == p.name)
            assert seen == n
    assert total == 20
    assert proxy.metric("pdproxy_requests_total", endpoint="/v1/completions", code="200") == 20
    assert proxy.metric("pdproxy_time_to_first_token_seconds_count", endpoint="/v1/completions") == 20
    assert proxy.metric("pdproxy_request_duration_seconds_count", endpoint="/v1/completions") == 20


def test_error_causes_and_backend_states_are_exported(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--max-retries", "0")
    proxy.post("/v1/completions", b"{bad")
    p.fault("500")
    proxy.post("/v1/completions", completion())
    p.fault("ok")
    assert proxy.post("/v1/completions", completion())[0] == 200
    text = proxy.metrics()
    assert proxy.metric("pdproxy_errors_total", cause="bad_request") == 1
    assert proxy.metric("pdproxy_errors_total", cause="prefill_5xx") == 1
    assert proxy.metric("pdproxy_backend_requests_total", role="prefill", outcome="5xx") == 1
    for name in ("pdproxy_backend_inflight", "pdproxy_backend_healthy", "pdproxy_backend_state",
                 "pdproxy_prefill_duration_seconds_bucket"):
        assert name in text


def test_a_client_that_hangs_up_once_answered_is_counted(cluster):
    """AISBench closes its connection as soon as it reads `data: [DONE]`, while the Decode's stream may not have
    ended: the request was answered and counts as such (a CI run's proxy counted 7 of 8)."""
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    d.fault("slow_end", legs=["decode"], seconds=1.0, times=3)
    body = json.dumps(completion(stream=True, max_tokens=4)).encode()
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            seen = b""
            while b"data: [DONE]" not in seen:
                chunk = sock.recv(65536)
                assert chunk, seen
                seen += chunk
        assert seen.startswith(b"HTTP/1.1 200")
    assert wait_until(lambda: proxy.metric("pdproxy_requests_total", endpoint="/v1/completions") == 3, timeout=5)
    assert proxy.metric("pdproxy_requests_total", endpoint="/v1/completions", code="200") == 3
    assert proxy.metric("pdproxy_request_duration_seconds_count", endpoint="/v1/completions") == 3
