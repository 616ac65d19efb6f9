"""/reset_prefix_cache fanned out to every instance (issue 13 item 3): the admin API sends vLLM's dev-mode
endpoint to every configured Prefill and Decode, and a repeated prompt then finds nothing in the Prefill's cache;
an instance that does not serve it (no VLLM_SERVER_DEV_MODE) or cannot be reached is named with its reason."""

import json
import re

import pytest

from tests.pdproxy.proxy_procs import completion, request

pytestmark = pytest.mark.procs  # every test here starts processes or servers

PROMPT = "the same long prompt " * 200  # about 800 tokens: several full 128-token blocks


def prefix_hits(engine) -> float:
    _, _, raw = request("GET", engine.url + "/metrics")
    return sum(float(v) for v in re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", raw.decode(), re.M))


def send(proxy) -> None:
    status, _, raw = proxy.post("/v1/completions", completion(prompt=PROMPT, model="sim-model", max_tokens=2))
    assert status == 200, raw


def test_reset_reaches_every_instance_and_a_repeated_prompt_misses_the_cache(cluster):
    p, d = cluster.engine("prefill", dev_mode=True), cluster.engine("decode", dev_mode=True)
    proxy = cluster.proxy([p], [d])
    send(proxy)
    before = prefix_hits(p)
    send(proxy)
    assert prefix_hits(p) > before  # the repeated prompt's blocks were in the Prefill's cache
    status, answer = proxy.admin("POST", "/reset_prefix_cache")
    assert status == 200, answer
    assert answer["reset"] == 2 and answer["failed"] == 0
    assert {(i["role"], i["address"], i["status"]) for i in answer["instances"]} == {("prefill", p.addr, 200),
                                                                                   ("decode", d.addr, 200)}
    after_reset = prefix_hits(p)
    send(proxy)
    assert prefix_hits(p) == after_reset  # nothing left to hit
    send(proxy)
    assert prefix_hits(p) > after_reset  # and the cache fills again


def test_an_instance_that_cannot_reset_is_named_with_its_reason(cluster):
    p, d = cluster.engine("prefill", dev_mode=True), cluster.engine("decode")  # d: no VLLM_SERVER_DEV_MODE
    proxy = cluster.proxy([p], [d, "127.0.0.1:9"])  # port 9: nobody listens
    status, answer = proxy.admin("POST", "/reset_prefix_cache?reset_running_requests=true")
    assert status == 502, answer
    assert answer["reset"] == 1 and answer["failed"] == 2
    by_addr = {i["address"]: i for i in answer["instances"]}
    assert by_addr[p.addr]["ok"] and by_addr[p.addr]["status"] == 200
    assert by_addr[d.addr]["status"] == 404 and "VLLM_SERVER_DEV_MODE=1" in by_addr[d.addr]["error"]
    assert by_addr["127.0.0.1:9"]["status"] is None and by_addr["127.0.0.1:9"]["error"]


def test_bad_calls_are_refused_saying_why(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    status, answer = proxy.admin("POST", "/reset_prefix_cache?reset_everything=true")
    assert status == 400 and "reset_everything" in answer["error"]["message"]
    status, answer = proxy.admin("POST", "/reset_prefix_cache?reset_external=maybe")
    assert status == 400 and "reset_external must be true or false" in answer["error"]["message"]
    assert proxy.admin("GET", "/reset_prefix_cache")[0] == 405
    assert proxy.admin("POST", "/reset_prefix_cache", token="wrong")[0] == 401
    status, _, raw = request("POST", proxy.url + "/reset_prefix_cache")  # the example's unauthenticated route
    assert status == 404 and "/admin/reset_prefix_cache" in json.loads(raw)["error"]["message"]
    assert not p.stats()["requests"] and not d.stats()["requests"]
