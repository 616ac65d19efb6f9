"""The honest-error gaps the fault probes found (issue 13 item 4): with no Decode to take a request the Prefill leg
never runs; a Decode timeout says gateway timeout; and one ejection rule for every passive failure (a timeout, a
broken stream, repeated 5xx): it ejects an instance that has healthy peers and never a role's last healthy one,
which only the active health check takes out (pdproxy/README.md, "Ejection")."""

import json

import pytest

from tests.pdproxy.proxy_procs import completion, sse_events, wait_until

pytestmark = pytest.mark.procs  # every test here starts processes or servers

# (fault, its arguments, the proxy's extra flags, requests that make it eject a Decode with a healthy peer)
FAULTS = {
    "timeout": ("hang", {}, ["--first-byte-timeout", "0.3"], 1),
    "broken stream": ("cut_after", {"n": 2}, [], 1),
    "5xx": ("500", {}, [], 3),
}


def states(proxy, role="decode") -> dict:
    _, listing = proxy.admin("GET", "/instances")
    return {i["address"]: i["state"] for i in listing[role]}


def test_no_decode_to_take_it_is_503_before_any_prefill_runs(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    assert proxy.post("/v1/completions", completion())[0] == 200
    d.fault("ok", health="fail")
    assert wait_until(lambda: states(proxy)[d.addr] == "ejected")
    p.reset()
    for stream in (False, True):
        status, headers, raw = proxy.post("/v1/completions", completion(stream=stream))
        assert status == 503, raw
        error = json.loads(raw)["error"]
        assert error["type"] == "ServiceUnavailableError" and "no healthy decode instance" in error["message"]
        assert d.addr in error["message"] and "x-request-id" in headers
    assert p.stats()["counts"].get("prefill", 0) == 0  # no KV made for a Decode that could not take it
    assert proxy.metric("pdproxy_errors_total", cause="no_decode") == 2


def test_a_decode_timeout_answers_504_gateway_timeout(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--first-byte-timeout", "0.3", "--max-retries", "0")
    d.fault("hang")
    for stream in (False, True):
        status, _, raw = proxy.post("/v1/completions", completion(stream=stream), timeout=10)
        assert status == 504, raw
        error = json.loads(raw)["error"]
        assert error["type"] == "GatewayTimeoutError" and d.addr in error["message"], error


@pytest.mark.parametrize("kind", FAULTS)
def test_the_only_decode_stays_in_after_any_passive_failure(cluster, kind):
    mode, kw, flags, _ = FAULTS[kind]
    p, d = cluster.backend("p1", chunks=8), cluster.backend("d1", chunks=8)
    proxy = cluster.proxy([p], [d], "--max-retries", "0", *flags)
    assert wait_until(lambda: states(proxy)[d.addr] == "healthy")
    d.fault(mode, **kw)
    for _ in range(4):
        status, _, raw = proxy.post("/v1/completions", completion(stream=True, max_tokens=8), timeout=10)
        assert status in (200, 502, 504), raw
        if status == 200:
            assert "error" in sse_events(raw)[-2]  # a broken stream says so
    assert states(proxy)[d.addr] == "healthy", kind  # its health check passes: requests keep reaching it
    d.fault("ok")
    status, _, raw = proxy.post("/v1/completions", completion(stream=True, max_tokens=8))
    assert status == 200 and sse_events(raw)[-1] == "[DONE]" and "error" not in sse_events(raw)[-2]


@pytest.mark.parametrize("kind", FAULTS)
def test_a_decode_with_a_healthy_peer_is_ejected_by_the_same_failures(cluster, kind):
    mode, kw, flags, ejecting = FAULTS[kind]
    p = cluster.backend("p1", chunks=8)
    d1, d2 = cluster.backend("d1", chunks=8), cluster.backend("d2", chunks=8)
    # health checks every 30 s: only the passive rule acts during the test
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin", "--max-retries", "0", *flags,
                          "--health-interval", "30")
    assert wait_until(lambda: set(states(proxy).values()) == {"healthy"})
    d1.fault(mode, **kw)
    sent = 0
    while states(proxy)[d1.addr] == "healthy" and sent < 2 * ejecting + 2:
        proxy.post("/v1/completions", completion(stream=True, max_tokens=8), timeout=10)
        sent += 1
    assert states(proxy) == {d1.addr: "ejected", d2.addr: "healthy"}, (kind, sent)
    assert d1.stats()["counts"].get("decode", 0) == ejecting
