"""TTFT and ITL p50/p99 over the window between two rounds: Prometheus' histogram_quantile on bucket deltas,
checked against values worked out by hand; buckets read from a recorded engine page; summed over an instance's
processes with restarts handled."""

from pathlib import Path

import pytest

from apps.telemetry.live import TargetInfo, bucket_delta, histogram_quantile, live_state
from apps.telemetry.scrape import TargetReading, read_target

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HIST = {"0.1": 2.0, "0.5": 6.0, "1.0": 9.0, "+Inf": 10.0}


@pytest.mark.parametrize(("q", "expected"), [
    (0.1, 0.05),   # rank 1 of 10 in (0, 0.1] holding 2: 0 + 0.1 × 1/2
    (0.5, 0.4),    # rank 5 in (0.1, 0.5] holding 4 above 2: 0.1 + 0.4 × 3/4
    (0.9, 1.0),    # rank 9 in (0.5, 1] holding 3 above 6: 0.5 + 0.5 × 3/3
    (0.99, 1.0),   # rank 9.9 in +Inf: the highest finite bound
])
def test_quantile_interpolates_linearly_inside_its_bucket(q, expected):
    assert histogram_quantile(q, HIST) == pytest.approx(expected)


def test_quantile_of_nothing_observed_or_without_inf_is_none():
    assert histogram_quantile(0.5, {"0.1": 0.0, "+Inf": 0.0}) is None  # empty window
    assert histogram_quantile(0.5, {}) is None
    assert histogram_quantile(0.5, {"0.1": 1.0, "0.5": 2.0}) is None  # no +Inf bucket: Prometheus says NaN
    assert histogram_quantile(0.5, {"+Inf": 3.0}) is None  # one bucket is no histogram


def test_quantile_mends_a_non_monotonic_read_as_prometheus_does():
    # cumulative 3, 2, 4 is read as 3, 3, 4: rank 2 of 4 falls in (0, 0.1] holding 3
    assert histogram_quantile(0.5, {"0.1": 3.0, "0.5": 2.0, "+Inf": 4.0}) == pytest.approx(0.1 * 2 / 3)


def test_bucket_delta_and_a_restarted_process():
    assert bucket_delta({"0.1": 5.0, "+Inf": 8.0}, {"0.1": 2.0, "+Inf": 4.0}) == {"0.1": 3.0, "+Inf": 4.0}
    assert bucket_delta({"0.1": 1.0, "+Inf": 1.0}, {"0.1": 2.0, "+Inf": 4.0}) == {"0.1": 1.0, "+Inf": 1.0}
    assert bucket_delta({"0.1": 1.0}, None) is None


def test_buckets_are_read_from_a_recorded_engine_page_summed_over_ranks():
    body = (FIXTURES / "engine-vllm-0.8-names.txt").read_text()
    v = read_target("d0-dp0", "decode", "http://127.0.0.1:1/metrics", fetch=lambda url: body).values
    assert v["itl_buckets"]["+Inf"] == v["itl_count"] == 1580.0  # time_per_output_token_seconds, ranks 0 and 1
    sim = read_target("p0-dp0", "prefill", "http://127.0.0.1:1/metrics",
                      fetch=lambda url: (FIXTURES / "engine-simcluster.txt").read_text()).values
    assert sim["ttft_buckets"]["+Inf"] == sim["ttft_count"] and sim["ttft_buckets"]["0.01"] == 4.0
    assert len(sim["ttft_buckets"]) == 23
    odd = read_target("p0-dp0", "prefill", "u", fetch=lambda url: "\n".join([
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{le="0.5"} 1', 'vllm:time_to_first_token_seconds_bucket{le="soon"} 2',
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3', "vllm:time_to_first_token_seconds_count 3", ""]))
    assert odd.status == "ok" and odd.values["ttft_buckets"] == {"0.5": 1.0, "+Inf": 3.0}


TARGETS = [TargetInfo("p0-dp0", "prefill", "p0", "10.0.0.1", 7100, "u"),
           TargetInfo("p0-dp1", "prefill", "p0", "10.0.0.1", None, "u")]


def engine(ttft: dict, itl: dict | None = None) -> dict:
    return {"running": 0, "waiting": 0, "ttft_buckets": ttft, "itl_buckets": itl or {}}


def state(at, dp0, dp1, previous=None):
    readings = [TargetReading("p0-dp0", "prefill", "u", values=dp0), TargetReading("p0-dp1", "prefill", "u",
                                                                                    values=dp1)]
    return live_state(deployment_id=1, at=at, targets=TARGETS, readings=readings, kv_bytes_per_token=None,
                      previous=previous)


def test_instance_quantiles_are_over_the_window_and_summed_over_its_processes():
    zero = {"0.1": 0.0, "0.5": 0.0, "+Inf": 0.0}
    first = state(100.0, engine({"0.1": 7.0, "0.5": 7.0, "+Inf": 7.0}), engine(zero))
    assert first["instances"]["p0"]["ttft_p50_s"] is None  # no window yet
    second = state(105.0, engine({"0.1": 9.0, "0.5": 11.0, "+Inf": 12.0}), engine({"0.1": 0.0, "0.5": 2.0,
                                                                                    "+Inf": 5.0}), first)
    p0 = second["instances"]["p0"]
    # window: dp0 2, 4, 5 + dp1 0, 2, 5 = 2, 6, 10; rank 5 in (0.1, 0.5]: 0.1 + 0.4 × 3/4; rank 9.9 in +Inf
    assert p0["ttft_p50_s"] == pytest.approx(0.4) and p0["ttft_p99_s"] == pytest.approx(0.5)
    assert p0["itl_p50_s"] is None and p0["itl_p99_s"] is None  # nothing observed
    # dp1 restarted (its buckets went down): all it shows is new; dp0 saw nothing in this window
    third = state(110.0, engine({"0.1": 9.0, "0.5": 11.0, "+Inf": 12.0}), engine({"0.1": 1.0, "0.5": 1.0,
                                                                                   "+Inf": 1.0}), second)
    assert third["instances"]["p0"]["ttft_p50_s"] == pytest.approx(0.05)
    still = state(115.0, engine({"0.1": 9.0, "0.5": 11.0, "+Inf": 12.0}), engine({"0.1": 1.0, "0.5": 1.0,
                                                                                   "+Inf": 1.0}), third)
    assert still["instances"]["p0"]["ttft_p50_s"] is None  # an empty window


def test_a_rank_that_has_observed_nothing_yet_does_not_hide_the_others():
    first = state(100.0, engine({"0.1": 0.0, "+Inf": 0.0}), engine({}))
    second = state(105.0, engine({"0.1": 4.0, "+Inf": 4.0}), engine({}), first)
    assert second["instances"]["p0"]["ttft_p50_s"] == pytest.approx(0.05)
