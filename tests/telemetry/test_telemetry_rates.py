"""Rates between two rounds and the KV flow of each P→D edge, on plain readings (no network)."""

import pytest

from apps.telemetry.live import (
    KV_SOURCE_ENGINE,
    KV_SOURCE_PROXY,
    TargetInfo,
    counter_delta,
    kv_bytes_rate,
    live_state,
    window_mean,
)
from apps.telemetry.scrape import OK, UNREACHABLE, TargetReading

P, D = "10.0.0.1:7100", "10.0.0.3:7100"
TARGETS = [TargetInfo("p0-dp0", "prefill", "p0", "10.0.0.1", 7100, "u"),
           TargetInfo("d0-dp0", "decode", "d0", "10.0.0.3", 7100, "u"),
           TargetInfo("proxy", "proxy", "", "10.0.0.5", 8000, "u")]


def engine(prompt, gen, ttft_count, ttft_sum, kv_bytes=None, direction="recv", peer=P, **gauges):
    return {"running": gauges.get("running", 1), "waiting": gauges.get("waiting", 0),
            "kv_usage": gauges.get("kv_usage", 0.25), "prompt_tokens": prompt, "generation_tokens": gen,
            "ttft_count": ttft_count, "ttft_sum": ttft_sum, "itl_count": gen, "itl_sum": gen * 0.02,
            "kv_transfer_model_bytes": [] if kv_bytes is None else
            [{"peer": peer, "direction": direction, "bytes": kv_bytes}]}


def proxy(requests, tokens):
    return {"edges": [{"prefill": P, "decode": D, "requests": requests, "prompt_tokens": tokens}],
            "backends": [{"role": "prefill", "backend": P, "requests": requests, "inflight": 1, "healthy": True,
                          "state": "healthy"}],
            "requests": requests, "ttft_count": requests, "ttft_sum": requests * 0.1}


def round_(at, p, d, px, previous=None, kv_bytes_per_token=100):
    readings = [TargetReading("p0-dp0", "prefill", "u", values=p), TargetReading("d0-dp0", "decode", "u", values=d),
                TargetReading("proxy", "proxy", "u", values=px)]
    return live_state(deployment_id=1, at=at, targets=TARGETS, readings=readings,
                      kv_bytes_per_token=kv_bytes_per_token, previous=previous)


def test_counter_and_histogram_arithmetic():
    assert counter_delta(150.0, 100.0) == 50.0
    assert counter_delta(20.0, 100.0) == 20.0  # restarted process: the counter began again at 0
    assert counter_delta(None, 1.0) is None
    assert window_mean(3.0, 1.0, 14.0, 10.0) == pytest.approx(0.5)
    assert window_mean(1.0, 1.0, 10.0, 10.0) is None  # nothing observed in the window
    assert kv_bytes_rate(1000.0, 192_512) == 192_512_000.0
    assert kv_bytes_rate(1000.0, None) is None


def test_first_round_has_totals_but_no_rates():
    s = round_(100.0, engine(1000, 0, 10, 1.0), engine(0, 500, 10, 2.0), proxy(10, 1000))
    edge = s["edges"]["kv_transfer:inst:p0->inst:d0"]
    assert edge["requests"] == 10 and edge["req_s"] is None and edge["kv_bytes_s"] is None
    assert s["instances"]["p0"]["running"] == 1 and s["instances"]["p0"]["prompt_tok_s"] is None
    assert s["interval_s"] is None


def test_rates_and_kv_flow_between_two_rounds():
    first = round_(100.0, engine(1000, 0, 10, 1.0), engine(0, 500, 10, 2.0, kv_bytes=100_000), proxy(10, 1000))
    second = round_(105.0, engine(3000, 0, 30, 3.0), engine(0, 1500, 30, 4.0, kv_bytes=300_000), proxy(30, 3000),
                    previous=first)
    assert second["interval_s"] == 5.0
    p0, d0 = second["instances"]["p0"], second["instances"]["d0"]
    assert p0["prompt_tok_s"] == 400.0 and d0["gen_tok_s"] == 200.0
    assert p0["ttft_s"] == pytest.approx(0.1) and d0["ttft_s"] == pytest.approx(0.1)
    assert d0["itl_s"] == pytest.approx(0.02)
    edge = second["edges"]["kv_transfer:inst:p0->inst:d0"]
    assert edge["req_s"] == 4.0 and edge["prompt_tok_s"] == 400.0
    assert edge["kv_bytes_s"] == 400.0 * 100 and edge["source"] == KV_SOURCE_PROXY
    assert "100 B/token" in edge["source_label"]
    assert edge["engine_kv_bytes_s"] == 40_000.0  # (300,000 - 100,000) / 5 s: the engines agree
    assert second["edges"]["request:proc:proxy->inst:p0"]["req_s"] == 4.0
    assert second["services"]["proxy"]["req_s"] == 4.0 and second["services"]["proxy"]["ttft_s"] == pytest.approx(0.1)


def test_without_the_proxy_the_engines_counters_are_the_source():
    first = round_(100.0, engine(0, 0, 0, 0), engine(0, 0, 0, 0, kv_bytes=0), proxy(0, 0))
    second_readings = [TargetReading("p0-dp0", "prefill", "u", values=engine(0, 0, 0, 0)),
                       TargetReading("d0-dp0", "decode", "u", values=engine(0, 0, 0, 0, kv_bytes=1_000_000)),
                       TargetReading("proxy", "proxy", "u", status=UNREACHABLE, reason="connection refused")]
    second = live_state(deployment_id=1, at=110.0, targets=TARGETS, readings=second_readings,
                        kv_bytes_per_token=100, previous=first)
    edge = second["edges"]["kv_transfer:inst:p0->inst:d0"]
    assert edge["kv_bytes_s"] == 100_000.0 and edge["source"] == KV_SOURCE_ENGINE
    assert edge["req_s"] is None
    assert second["services"]["proxy"] == {"status": UNREACHABLE, "reason": "connection refused"}


def test_an_unreachable_rank_makes_its_instance_partial_and_says_why():
    targets = [*TARGETS, TargetInfo("d0-dp1", "decode", "d0", "10.0.0.3", 7101, "u")]
    readings = [TargetReading("d0-dp0", "decode", "u", values=engine(0, 10, 1, 0.1, kv_usage=0.5, running=3)),
                TargetReading("d0-dp1", "decode", "u", status=UNREACHABLE, reason="read timeout after 2 s")]
    s = live_state(deployment_id=1, at=1.0, targets=targets, readings=readings, kv_bytes_per_token=1, previous=None)
    d0 = s["instances"]["d0"]
    assert d0["status"] == "partial" and "d0-dp1: unreachable (read timeout after 2 s)" in d0["reason"]
    assert d0["running"] == 3 and d0["kv_usage"] == 0.5 and (d0["processes"], d0["reachable"]) == (2, 1)
    assert [t["status"] for t in s["targets"]] == [OK, UNREACHABLE]


def test_a_stale_previous_round_gives_no_rates():
    first = round_(100.0, engine(0, 0, 0, 0), engine(0, 0, 0, 0), proxy(0, 0))
    later = round_(400.0, engine(10, 0, 1, 0.1), engine(0, 0, 0, 0), proxy(1, 10), previous=first)
    assert later["interval_s"] is None and later["edges"]["kv_transfer:inst:p0->inst:d0"]["req_s"] is None


def test_history_keeps_what_both_sparklines_draw():
    from apps.telemetry.live import history_point

    first = round_(100.0, engine(1000, 0, 10, 1.0), engine(0, 500, 10, 2.0), proxy(10, 1000))
    second = round_(105.0, engine(3000, 0, 30, 3.0), engine(0, 1500, 30, 4.0), proxy(30, 3000), previous=first)
    point = history_point(second)
    assert point["instances"]["p0"]["prompt_tok_s"] == 400.0  # Prefill draws prompt tokens/s
    assert point["instances"]["d0"]["gen_tok_s"] == 200.0  # Decode draws generated tokens/s
