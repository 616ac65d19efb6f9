"""Every leg gives its backend back: after successes, retries, client disconnects, broken streams and
timeouts, each instance's in-flight count (admin API and metrics) returns to 0. A leaked count would steer
least_conn and the bounded-load hash away from a healthy instance for good, and keep a drained one busy."""

import concurrent.futures as cf
import json
import socket
import time

import pytest

from tests.pdproxy.proxy_procs import completion, request, sse_events, wait_until

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def inflight(proxy) -> dict:
    """{address: in-flight count} of every instance, from the admin API."""
    status, listing = proxy.admin("GET", "/instances")
    assert status == 200
    return {i["address"]: i["inflight"] for role in ("prefill", "decode") for i in listing[role]}


def assert_all_released(proxy):
    settled = wait_until(lambda: not any(inflight(proxy).values()), timeout=5)
    assert settled, f"in-flight counts left over: {inflight(proxy)}"
    assert proxy.metric("pdproxy_backend_inflight") == 0
    assert json.loads(request("GET", proxy.url + "/health")[2])["request_num"] == 0


def all_healthy(proxy) -> bool:
    status, listing = proxy.admin("GET", "/instances")
    return all(i["state"] == "healthy" for role in ("prefill", "decode") for i in listing[role])


def hang_up_after(proxy, body: dict, seconds: float, rcvbuf: int = 0):
    """Send one request on a raw socket, read nothing, and close it after `seconds`."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", proxy.port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%b" % (len(data), data))
    time.sleep(seconds)
    s.close()


def post_all(proxy, bodies):
    with cf.ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda b: proxy.post("/v1/completions", b), bodies))


def test_in_flight_counts_return_to_zero_after_every_kind_of_outcome(cluster):
    p1, p2 = cluster.backend("p1"), cluster.backend("p2")
    d1, d2 = cluster.backend("d1", chunks=20000), cluster.backend("d2", chunks=20000)
    proxy = cluster.proxy([p1, p2], [d1, d2], "--policy", "round_robin", "--first-byte-timeout", "1")
    # successes, streaming and not, concurrent
    assert all(r[0] == 200 for r in post_all(proxy, [completion(stream=i % 2 == 0) for i in range(8)]))
    # failed, then retried: Prefill 5xx and garbage, Decode 5xx (re-prefill), Prefill timeout
    for backend, mode, legs in ((p1, "500", None), (p2, "garbage_json", None), (d1, "500", ["decode"]),
                                (p1, "hang", ["prefill"])):
        backend.fault(mode, times=1, **({"legs": legs} if legs else {}))
        assert [r[0] for r in post_all(proxy, [completion(), completion(stream=True)])] == [200, 200]
        assert wait_until(lambda: all_healthy(proxy))
    # passed through: Decode 4xx
    d2.fault("400", legs=["decode"], times=1)
    assert sorted(r[0] for r in post_all(proxy, [completion(), completion()])) == [200, 400]
    # broken stream: one of two streams ends with an SSE error event
    d1.fault("cut_after", n=3, times=1)
    answers = post_all(proxy, [completion(stream=True), completion(stream=True)])
    assert sum(any("error" in e for e in sse_events(raw) if isinstance(e, dict)) for _, _, raw in answers) == 1
    assert wait_until(lambda: all_healthy(proxy))
    # recomputed on Decode, continued on a new PD pair, streaming and not
    for stream in (True, False):
        d2.fault("recompute_after", n=2, times=1)
        assert [r[0] for r in post_all(proxy, [completion(stream=stream), completion(stream=stream)])] == [200, 200]
    assert request("GET", proxy.url + "/v1/models")[0] == 200
    assert_all_released(proxy)

    # client gone while Prefill works: the count was held (so this check can see one) and is given back
    for p in (p1, p2):
        p.fault("hang", legs=["prefill"])
    with cf.ThreadPoolExecutor(1) as pool:
        gone = pool.submit(hang_up_after, proxy, completion(), 0.4)
        assert wait_until(lambda: sum(inflight(proxy).values()) == 1, timeout=2)
        gone.result()
    p1.fault("ok")
    p2.fault("ok")
    assert_all_released(proxy)
    # client gone while Decode has not answered yet
    for d in (d1, d2):
        d.fault("slow_first_byte", seconds=0.4, legs=["decode"], times=1)
    hang_up_after(proxy, completion(stream=True), 0.2)
    d1.fault("ok")
    d2.fault("ok")
    assert_all_released(proxy)
    # client gone mid-stream without reading (backpressure had paused the Decode)
    hang_up_after(proxy, completion(stream=True, max_tokens=20000), 0.5, rcvbuf=4096)
    assert_all_released(proxy)
    # and the proxy still serves
    assert all(r[0] == 200 for r in post_all(proxy, [completion(stream=True), completion()]))
    assert_all_released(proxy)


def test_in_flight_counts_return_to_zero_after_a_refused_decode_connect(cluster):
    p, gone, d = cluster.backend("p1"), cluster.backend("d-gone"), cluster.backend("d1")
    # the checker's first round runs as the proxy starts; the next one comes long after the requests, so the
    # dead Decode is still picked and refuses the connection
    proxy = cluster.proxy([p], [gone, d], "--policy", "round_robin", "--health-interval", "30")
    time.sleep(0.5)
    gone.kill()
    for stream in (True, False):
        assert proxy.post("/v1/completions", completion(stream=stream))[0] == 200
    assert proxy.metric("pdproxy_backend_requests_total", backend=gone.addr, outcome="connect") == 1
    assert p.stats()["counts"]["prefill"] == 2  # the refused Decode kept the KV: no second Prefill
    assert_all_released(proxy)
