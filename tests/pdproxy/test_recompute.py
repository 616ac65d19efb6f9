"""vllm-ascend's stop_reason "recomputed": the proxy re-prefills prompt + text so far and continues."""

import json

import pytest

from tests.pdproxy.proxy_procs import completion, sse_events

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_stream_recomputed_continues_on_a_new_pd_pair(cluster):
    p = cluster.backend("p1")
    d1, d2 = cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin")
    d1.fault("recompute_after", n=4, times=1)
    status, _, raw = proxy.post("/v1/completions", completion(prompt="one two", stream=True, max_tokens=10))
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in events[:-1]]
    assert all(e["choices"][0].get("stop_reason") != "recomputed" for e in events[:-1])
    # 4 tokens from the first Decode, then the 6 that were left from the second
    assert "".join(texts) == "t0 t1 t2 t3 " + "".join(f"t{i} " for i in range(6))
    pre = p.stats()["requests"]
    assert len(pre) == 2 and pre[1]["prompt"] == "one twot0 t1 t2 t3 "
    assert d2.stats()["requests"][0]["max_tokens"] == 6
    assert proxy.metric("pdproxy_recomputes_total") == 1


def test_non_stream_recomputed_is_merged(cluster):
    p = cluster.backend("p1")
    d1, d2 = cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin")
    d1.fault("recompute_after", n=3, times=1)
    status, _, raw = proxy.post("/v1/completions", completion(prompt="one two", max_tokens=8))
    assert status == 200
    choice = json.loads(raw)["choices"][0]
    assert choice["text"] == "t0 t1 t2 " + "".join(f"t{i} " for i in range(5))
    assert choice["stop_reason"] is None and choice["finish_reason"] == "length"
    assert json.loads(raw)["usage"]["completion_tokens"] == 8


def test_chat_recompute_continues_the_assistant_message(cluster):
    p = cluster.backend("p1")
    d1, d2 = cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p], [d1, d2], "--policy", "round_robin")
    d1.fault("recompute_after", n=2, times=1)
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": 5}
    status, _, raw = proxy.post("/v1/chat/completions", body)
    assert status == 200
    msgs = p.stats()["requests"][1]["messages"]
    assert msgs[-1] == {"role": "assistant", "content": "t0 t1 "}
    assert sse_events(raw)[-1] == "[DONE]"
