"""Active health checks and a busy engine: a real vLLM on two cores missed pdproxy's 1 s health check under load,
and one missed check ejected it, so the busy Prefill flapped out and back in every few seconds
(docs/real-engine.md). A check left unanswered now ejects only the --health-timeouts-to-eject-th time in a row; a
refused connection or an error answer still ejects at once."""

from __future__ import annotations

import pytest

from pdproxy.backend_pool import EJECTED, HEALTHY, Backend, BackendPool
from pdproxy.config import Config, ConfigError
from tests.pdproxy.proxy_procs import completion, wait_until


def healthy_pool(threshold: int = 3) -> tuple[BackendPool, Backend]:
    pool = BackendPool("prefill", health_timeouts_to_eject=threshold)
    b = pool.add("127.0.0.1:7001")
    pool.report_probe(b, None)
    assert b.state == HEALTHY
    return pool, b


def test_unanswered_checks_eject_only_the_thresholdth_in_a_row():
    pool, b = healthy_pool(3)
    pool.report_probe(b, "health check: no response head from backend within 1s", unanswered=True)
    pool.report_probe(b, "health check: no response head from backend within 1s", unanswered=True)
    assert b.state == HEALTHY and "within 1s" in b.last_error
    pool.report_probe(b, None)  # an answer in time starts the count again
    pool.report_probe(b, "late", unanswered=True)
    pool.report_probe(b, "late", unanswered=True)
    assert b.state == HEALTHY
    pool.report_probe(b, "late", unanswered=True)
    assert b.state == EJECTED


@pytest.mark.parametrize("failure", ["health check: cannot connect to 127.0.0.1:7001: Connection refused",
                                     "health check /health answered HTTP 503"])
def test_a_refused_connection_or_an_error_answer_ejects_at_once(failure):
    pool, b = healthy_pool(3)
    pool.report_probe(b, failure)
    assert b.state == EJECTED and b.last_error == failure


def test_the_threshold_is_validated():
    with pytest.raises(ConfigError, match="health_timeouts_to_eject must be >= 1"):
        Config(prefill=["127.0.0.1:1"], decode=["127.0.0.1:2"], health_timeouts_to_eject=0).validate()


@pytest.mark.procs
def test_a_busy_engine_that_answers_its_checks_late_keeps_serving(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    patient = cluster.proxy([p], [d], "--health-interval", "0.1", "--health-timeout", "0.1",
                            "--health-timeouts-to-eject", "1000")
    strict = cluster.proxy([p], [d], "--health-interval", "0.1", "--health-timeout", "0.1",
                           "--health-timeouts-to-eject", "3")
    p.fault("ok", health="slow", health_seconds=0.4)

    def prefill_state(proxy):
        return proxy.admin("GET", "/instances")[1]["prefill"][0]

    ejected = wait_until(lambda: prefill_state(strict)["state"] == "ejected", timeout=10)
    assert ejected, prefill_state(strict)
    assert "3 checks in a row" in prefill_state(strict)["last_error"]
    late = prefill_state(patient)
    assert late["state"] == "healthy" and "within 0.1s" in late["last_error"], late
    assert patient.post("/v1/completions", completion())[0] == 200
