"""Sustained load through pdproxy (2 Prefills, 2 Decodes: simcluster engines and the proxy as processes on
127.0.10.20-.24) while one Decode is SIGKILLed 20 s in. What holds: nothing is lost; the only errors are honest ones
for streams the killed Decode had begun (pdproxy/README.md: nothing is retried once the client got a byte); every
request sent after the kill is answered; the proxy keeps serving, at most a bounded tail in the seconds after the
kill. Measured: answers, honest errors, throughput before and after, p50/p99 latency before, during (the 5 s after
the kill) and after."""

from __future__ import annotations

import pytest

from tests.reliability.engine_load import Load, Procs, counts, misanswered, percentile, proxy_metric

pytestmark = [pytest.mark.procs, pytest.mark.reliability, pytest.mark.timeout(240)]

PREFILL_HOSTS, DECODE_HOSTS, PROXY_HOST = ("127.0.10.20", "127.0.10.21"), ("127.0.10.22", "127.0.10.23"), "127.0.10.24"
CLIENTS = 32
DURATION_S = 60.0
KILL_AT_S = 20.0
DURING_S = 5.0  # "during": requests started in the 5 s after the kill
WARM_UP_S = 2.0  # left out of "before"
COMMAND = 'make reliability PYTEST_ARGS="tests/reliability/test_proxy_load_through_decode_failure.py"'


@pytest.fixture
def procs():
    p = Procs(time_scale="0.5")  # 6 ms per generated token: the engines share this machine's two cores
    try:
        yield p
    finally:
        p.stop_all()


def window(outcomes, t0: float, start: float, end: float) -> dict:
    """Requests started in [start, end) seconds after t0: their count, p50/p99 latency (ms) of the answered ones,
    and answers completed in the window per second."""
    started = [o for o in outcomes if start <= o.start - t0 < end]
    latencies = [o.latency * 1000 for o in started if o.kind == "answered"]
    done = sum(1 for o in outcomes if o.kind == "answered" and start <= o.end - t0 < end)
    return {"requests": len(started), "p50_ms": round(percentile(latencies, 50), 1),
            "p99_ms": round(percentile(latencies, 99), 1), "answers_per_s": round(done / (end - start), 1)}


def test_proxy_load_through_a_decode_failure(procs, figure):
    prefills = [procs.engine("prefill", h) for h in PREFILL_HOSTS]
    decodes = [procs.engine("decode", h) for h in DECODE_HOSTS]
    procs.wait_healthy(prefills + decodes)
    proxy = procs.proxy(PROXY_HOST, prefills, decodes)
    victim = decodes[1]

    load = Load(proxy.url, CLIENTS, DURATION_S, at=[(KILL_AT_S, victim.kill)]).start()
    outcomes = load.join()

    c = counts(outcomes)
    t0, kill = load.started, victim.killed_at - load.started
    assert c["lost"] == 0, [o.detail for o in outcomes if o.kind == "lost"][:5]
    assert misanswered(outcomes, victim) == []
    # the requests it held were prefilled again, never sent on with the KV it had pulled
    assert proxy_metric(proxy, "pdproxy_backend_requests_total", backend=decodes[0].addr, outcome="5xx") == 0
    after_kill = [o for o in outcomes if o.start > victim.killed_at]
    assert after_kill and all(o.kind == "answered" for o in after_kill)
    before = window(outcomes, t0, WARM_UP_S, kill)
    during = window(outcomes, t0, kill, kill + DURING_S)
    after = window(outcomes, t0, kill + DURING_S, DURATION_S)
    assert after["answers_per_s"] >= 0.3 * before["answers_per_s"], (before, after)  # one Decode still serves
    assert during["p99_ms"] < 5000, during  # failing over costs a retry, never a hang
    assert proxy_metric(proxy, "pdproxy_backend_healthy", backend=victim.addr) == 0

    figure("proxy-load-decode-failure",
           held=f"{CLIENTS} concurrent clients (half streaming) for {DURATION_S:g} s through pdproxy, 2P2D, one Decode "
                f"SIGKILLed {kill:.0f} s in: 0 lost; honest errors only for streams the killed Decode had begun; "
                "every request sent after the kill answered; throughput after >= 30 % of before; p99 in the 5 s "
                "after the kill < 5 s",
           figure=f"{c['sent']} sent, {c['answered']} answered, {c['honest']} honest errors, {c['lost']} lost; "
                  f"{before['answers_per_s']:g} answers/s before, {after['answers_per_s']:g} after; p50/p99 ms "
                  f"before {before['p50_ms']:g}/{before['p99_ms']:g}, during {during['p50_ms']:g}/"
                  f"{during['p99_ms']:g}, after {after['p50_ms']:g}/{after['p99_ms']:g}",
           command=COMMAND,
           values={**c, "kill_s": round(kill, 2), "before": before, "during": during, "after": after,
                   "retries_total": proxy_metric(proxy, "pdproxy_retries_total")})
