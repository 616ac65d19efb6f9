"""Admin API: token-protected list, add, remove, drain without a restart."""

import concurrent.futures as cf
import json

import pytest

from tests.pdproxy.proxy_procs import completion, request

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_admin_needs_the_bearer_token(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    assert proxy.admin("GET", "/instances", token="")[0] == 401
    assert proxy.admin("GET", "/instances", token="wrong")[0] == 401
    status, listing = proxy.admin("GET", "/instances")
    assert status == 200
    assert [i["address"] for i in listing["prefill"]] == [p.addr]
    assert listing["decode"][0]["state"] == "healthy"


def test_admin_disabled_without_token(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], token=None)
    status, _, _ = request("GET", proxy.url + "/admin/instances", headers={"Authorization": "Bearer x"})
    assert status == 403


def test_add_instance_takes_traffic_after_its_health_check(cluster):
    p, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1], "--policy", "round_robin")
    status, body = proxy.admin("POST", "/instances", {"role": "decode", "address": d2.addr})
    assert status == 201 and body["added"][0]["state"] == "healthy"
    assert proxy.admin("POST", "/instances", {"role": "decode", "address": d2.addr})[0] == 409
    assert proxy.admin("POST", "/instances", {"role": "nope", "address": d2.addr})[0] == 400
    assert proxy.admin("POST", "/instances", {"role": "decode", "address": "no-port"})[0] == 400
    for _ in range(4):
        assert proxy.post("/v1/completions", completion())[0] == 200
    assert d2.stats()["counts"]["decode"] == 2
    # the example proxy's payload shape is accepted too; a dead instance stays pending
    status, body = proxy.admin("POST", "/instances", {"type": "prefill", "instances": ["127.0.0.1:1"]})
    assert status == 201 and body["added"][0]["state"] == "pending"


def test_remove_instance(cluster):
    p, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2])
    status, _ = proxy.admin("DELETE", f"/instances/decode/{d1.addr}")
    assert status == 200
    assert proxy.admin("DELETE", f"/instances/decode/{d1.addr}")[0] == 404
    for _ in range(4):
        assert proxy.post("/v1/completions", completion())[0] == 200
    assert d1.stats()["counts"]["decode"] == 0 and d2.stats()["counts"]["decode"] == 4
    assert proxy.metric("pdproxy_backend_inflight", backend=d1.addr) == 0
    assert d1.addr not in proxy.metrics().split("pdproxy_backend_inflight", 1)[1]


def test_drain_lets_in_flight_finish_and_takes_no_new_requests(cluster):
    p = cluster.backend("p1")
    d1 = cluster.backend("d1", chunks=10, token_delay=0.1)
    d2 = cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin")
    with cf.ThreadPoolExecutor(2) as pool:
        long = pool.submit(proxy.post, "/v1/completions", completion(stream=True, max_tokens=10))
        import time
        time.sleep(0.3)
        status, info = proxy.admin("POST", f"/instances/decode/{d1.addr}/drain")
        assert status == 200 and info["state"] == "draining" and info["inflight"] == 1
        for _ in range(4):
            assert proxy.post("/v1/completions", completion())[0] == 200
        status, _, raw = long.result()
        assert status == 200 and raw.rstrip().endswith(b"data: [DONE]")
    assert d1.stats()["counts"]["decode"] == 1
    status, info = proxy.admin("GET", f"/instances/decode/{d1.addr}")
    assert info["inflight"] == 0 and info["state"] == "draining"
    status, info = proxy.admin("POST", f"/instances/decode/{d1.addr}/undrain")
    assert info["state"] == "healthy"


def test_admin_listener_of_its_own_takes_the_admin_api_off_the_main_port(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--admin-host", "127.0.0.1", "--admin-port", "0")
    assert proxy.admin_port and proxy.admin_port != proxy.port
    # the main listener no longer knows the admin API, token or not
    assert proxy.admin("GET", "/instances")[0] == 404
    admin_url = f"http://127.0.0.1:{proxy.admin_port}/admin/instances"
    status, _, raw = request("GET", admin_url, headers={"Authorization": f"Bearer {proxy.token}"})
    assert status == 200 and [i["address"] for i in json.loads(raw)["decode"]] == [d.addr]
    assert request("GET", admin_url, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert request("GET", admin_url)[0] == 401
    # and the admin listener serves the admin API only
    assert request("GET", f"http://127.0.0.1:{proxy.admin_port}/health")[0] == 404
    assert request("POST", f"http://127.0.0.1:{proxy.admin_port}/v1/completions", completion())[0] == 404
    assert proxy.post("/v1/completions", completion())[0] == 200
