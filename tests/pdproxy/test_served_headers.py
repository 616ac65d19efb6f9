"""The answer's X-PD-Prefill / X-PD-Decode / X-PD-Retries headers name the instances that really served it."""

import json

import pytest

from tests.pdproxy.proxy_procs import completion, sse_events

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def served_by(*backends) -> list[str]:
    """The addresses of the backends that recorded a request (fake_backend /_stats)."""
    return [b.addr for b in backends if b.stats()["requests"]]


def test_a_whole_answer_names_its_prefill_and_decode(cluster):
    p1, p2 = cluster.backend("p1"), cluster.backend("p2")
    d1, d2 = cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p1, p2], [d1, d2], "--policy", "round_robin")
    status, headers, raw = proxy.post("/v1/completions", completion(max_tokens=3), {"X-Request-Id": "rid-1"})
    assert status == 200, raw
    assert headers["x-request-id"] == "rid-1"
    assert [headers["x-pd-prefill"]] == served_by(p1, p2)
    assert [headers["x-pd-decode"]] == served_by(d1, d2)
    assert headers["x-pd-retries"] == "0"
    assert json.loads(raw)["served_by"] in ("d1", "d2")


def test_a_stream_names_them_in_its_head(cluster):
    p1, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p1], [d1, d2], "--policy", "round_robin")
    seen = set()
    for i in range(2):  # round robin: both Decodes serve one each
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "max_tokens": 4}
        status, headers, raw = proxy.post("/v1/chat/completions", body, {"X-Request-Id": f"s-{i}"})
        assert status == 200 and sse_events(raw)[-1] == "[DONE]"
        assert headers["x-pd-prefill"] == p1.addr
        seen.add(headers["x-pd-decode"])
    assert seen == {d1.addr, d2.addr}


def test_a_retried_decode_is_counted_and_the_one_that_answered_is_named(cluster):
    p1, d1, d2 = cluster.backend("p1"), cluster.backend("d1"), cluster.backend("d2")
    proxy = cluster.proxy([p1], [d1, d2], "--policy", "round_robin")
    d1.fault("500", times=1)
    d2.fault("500", times=1)  # whichever comes first fails once; the retry lands on a Decode that answers
    status, headers, raw = proxy.post("/v1/completions", completion(max_tokens=2, stream=True))
    assert status == 200, raw
    assert int(headers["x-pd-retries"]) >= 1
    # the Decode leg tried last is the one that answered
    tried = sorted((r["t"], b.addr) for b in (d1, d2) for r in b.stats()["requests"] if r["leg"] == "decode")
    assert len(tried) >= 2
    assert headers["x-pd-decode"] == tried[-1][1]


def test_an_error_answer_carries_only_the_request_id(cluster):
    p1, d1 = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p1], [d1])
    status, headers, _ = proxy.post("/v1/completions", completion(model="nope"))
    assert status == 404
    assert "x-request-id" in headers and "x-pd-decode" not in headers
