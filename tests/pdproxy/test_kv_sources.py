"""`--kv-events discover` (pdproxy/kv_sources.py): engines publish on `tcp://*:0` (a port of their choosing on their
own address) and the proxy learns where from each engine's GET /kv_event_sources, as vLLM reports it; an engine that
restarts on new ports is found again."""

import json
import os
import signal

import pytest

from tests.pdproxy.proxy_procs import request, wait_until
from tests.pdproxy.test_kv_events import ask, doc, engine, kv_blocks, picks
from tests.ports import free_port

MODEL = "sim-model"


def any_port_engine(cluster, port=None, kv_port=None, **kw):
    """A simulated engine whose publisher and replay endpoints are tcp://*:0."""
    return engine(cluster, ports=(port or free_port(), kv_port or free_port(), 0, 0), **kw)


def sources(eng) -> dict:
    return json.loads(request("GET", eng.url + "/kv_event_sources")[2])


@pytest.mark.procs
def test_the_proxy_subscribes_where_each_engine_says_it_publishes(cluster, tokenizer):
    ps = [any_port_engine(cluster) for _ in range(2)]
    d = engine(cluster, "decode", events=False)
    reported = [sources(p)["0"] for p in ps]
    assert all(r["endpoint"].startswith("tcp://127.0.0.1:") and not r["endpoint"].endswith(":0") for r in reported)
    proxy = cluster.proxy(ps, [d], "--prefill-policy", "cache_aware", "--decode-policy", "least_conn",
                          "--tokenizer", tokenizer, "--kv-events", "discover")
    assert wait_until(lambda: kv_blocks(proxy).keys() == {p.addr for p in ps}, timeout=30), kv_blocks(proxy)

    holder = ps[1]
    alpha = doc("alpha", 4)
    assert ask(holder.url, alpha)[0] == 200
    assert wait_until(lambda: kv_blocks(proxy)[holder.addr] == 4, timeout=10), kv_blocks(proxy)
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": alpha + " sim", "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == holder.addr and picks(proxy, "kv_events") == 1

    # restarted on the same API port, the engine binds new event ports; the proxy asks again and follows them
    os.kill(holder.proc.pid, signal.SIGKILL)
    holder.proc.wait(5)
    assert wait_until(lambda: holder.addr not in kv_blocks(proxy), timeout=10), kv_blocks(proxy)
    again = any_port_engine(cluster, holder.port, holder.kv_port)
    assert sources(again)["0"]["endpoint"] != reported[1]["endpoint"]
    assert wait_until(lambda: kv_blocks(proxy).get(holder.addr) == 0, timeout=30), kv_blocks(proxy)
    beta = doc("beta", 3)
    assert ask(again.url, beta)[0] == 200
    assert wait_until(lambda: kv_blocks(proxy)[holder.addr] == 3, timeout=10), kv_blocks(proxy)
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": beta + " sim", "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == holder.addr and picks(proxy, "kv_events") == 2


@pytest.mark.procs
def test_an_engine_that_publishes_nothing_keeps_the_approximate_view(cluster, tokenizer):
    quiet, loud = any_port_engine(cluster, events=False), any_port_engine(cluster)
    d = engine(cluster, "decode", events=False)
    assert sources(quiet) == {}
    proxy = cluster.proxy([quiet, loud], [d], "--prefill-policy", "cache_aware", "--decode-policy", "least_conn",
                          "--tokenizer", tokenizer, "--kv-events", f"{quiet.addr}=discover", "discover")
    assert wait_until(lambda: kv_blocks(proxy).keys() == {loud.addr}, timeout=30), kv_blocks(proxy)
    gamma = doc("gamma", 2)
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": gamma, "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == quiet.addr  # the emptiest, the first
    status, headers, _ = proxy.post("/v1/completions", {"model": MODEL, "prompt": gamma + " 1", "max_tokens": 2})
    assert status == 200 and headers["x-pd-prefill"] == quiet.addr and picks(proxy, "cache") == 1


VLLM_ANSWER = {"0": {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://10.0.0.5:41234",
                     "replay_endpoint": "tcp://10.0.0.5:41235", "buffer_steps": 10000, "hwm": 100000,
                     "max_queue_size": 100000, "topic": "kv"},
               "1": {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5558",
                     "replay_endpoint": None, "buffer_steps": 10000, "hwm": 100000, "max_queue_size": 100000,
                     "topic": ""}}


def test_an_answer_is_read_per_rank_with_a_wildcard_standing_for_the_instance():
    from pdproxy.kv_index import Endpoint
    from pdproxy.kv_sources import parse_sources

    assert parse_sources(json.dumps(VLLM_ANSWER).encode(), "10.0.0.5") == [
        (Endpoint("tcp://10.0.0.5:41234", "tcp://10.0.0.5:41235"), "kv"), (Endpoint("tcp://10.0.0.5:5558"), "")]
    off = {"0": {**VLLM_ANSWER["0"], "enable_kv_cache_events": False, "publisher": "null"}}
    assert parse_sources(json.dumps(off).encode(), "10.0.0.5") == []


@pytest.mark.parametrize("body, message", [
    (b"<html>", "is not JSON"),
    (b"[]", "expected an object"),
    (json.dumps({"x": {}}).encode(), "rank 'x'"),
    (json.dumps({"0": {**VLLM_ANSWER["0"], "endpoint": None}}).encode(), "rank 0: endpoint None"),
    (json.dumps({"0": {**VLLM_ANSWER["0"], "replay_endpoint": "http://h:1"}}).encode(), "rank 0: replay_endpoint"),
])
def test_a_bad_answer_is_named(body, message):
    from pdproxy.kv_sources import SourcesError, parse_sources

    with pytest.raises(SourcesError, match=message):
        parse_sources(body, "10.0.0.5")


def test_discover_is_a_spec_for_one_instance_or_for_all():
    from pdproxy.kv_index import DISCOVER, ExactView

    view = ExactView(["10.0.0.9:7100=discover", "tcp://{host}:5557"], "", None)
    assert view.endpoints("10.0.0.9:7100") == DISCOVER and view.endpoints("10.0.0.1:7100")[0].pub == "tcp://10.0.0.1:5557"
    assert ExactView(["discover"], "", None).endpoints("10.0.0.1:7100") == DISCOVER
