"""Admission control: 429 with Retry-After, 413 for big bodies."""

import json

import pytest

from tests.pdproxy.proxy_procs import completion

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_global_rate_limit_answers_429_with_retry_after(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--rate-limit", "0.5", "--rate-burst", "3")
    codes = [proxy.post("/v1/completions", completion()) for _ in range(5)]
    assert [c[0] for c in codes] == [200, 200, 200, 429, 429]
    status, headers, raw = codes[3]
    assert int(headers["retry-after"]) >= 1
    assert json.loads(raw)["error"]["code"] == 429
    assert proxy.metric("pdproxy_rate_limited_total", scope="global") == 2
    assert p.stats()["counts"]["prefill"] == 3


def test_per_client_rate_limit_is_per_client(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--client-rate-limit", "0.5", "--client-rate-burst", "2",
                          "--client-key", "header:X-Api-Key")
    alice = [proxy.post("/v1/completions", completion(), {"X-Api-Key": "alice"})[0] for _ in range(3)]
    bob = [proxy.post("/v1/completions", completion(), {"X-Api-Key": "bob"})[0] for _ in range(2)]
    assert alice == [200, 200, 429]
    assert bob == [200, 200]


def test_body_over_the_limit_is_413(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--max-body-bytes", "1000")
    status, _, raw = proxy.post("/v1/completions", completion(prompt="x" * 2000))
    assert status == 413 and "1000" in json.loads(raw)["error"]["message"]
    assert proxy.post("/v1/completions", completion(prompt="x" * 100))[0] == 200
    assert p.stats()["counts"]["prefill"] == 1
