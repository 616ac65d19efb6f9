"""The P:D ratio advisor's pure logic (apps/evals/advisor.py, advisor_layout.py): layouts read from spec copies,
targets met and missed, ties, no runs, unreadable specs, like-with-like groups, and its parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apps.evals.advisor import (
    BadAdvisorQuery,
    GroupKey,
    RunRecord,
    Targets,
    advise,
    group_of,
    groups_of,
    parse_query,
)
from apps.evals.advisor_layout import LayoutUnreadable, layout_of, ratio
from tests.evals.advisor_runs import spec_with

TWO_P_ONE_D = spec_with([(8, 1), (8, 1)], [(4, 4)])  # 16 + 16 NPUs
ONE_P_ONE_D = spec_with([(8, 1)], [(4, 4)])  # 8 + 16 NPUs
ONE_P_TWO_D = spec_with([(16, 1)], [(4, 4), (4, 4)])  # 16 + 32 NPUs
serial = iter(range(1, 10_000))


def record(spec, *, throughput, ttft, tpot, concurrency=4, run_id=None, model="qwen3-235b",
           dataset="catalogue:gsm8k", max_out_len=2048, stats=("avg", "median", "p90", "p99"), **extra):
    """A run measuring `ttft`/`tpot` at p90 (the other stats spread around it)."""
    spread = {"avg": 0.8, "median": 0.75, "p75": 0.9, "p90": 1.0, "p99": 1.3}
    return RunRecord(run_id=run_id or next(serial), sweep_id=extra.get("sweep_id"), deployment="d", revision=1,
                     model=model, dataset=dataset, max_out_len=max_out_len, api_style=extra.get("api_style", "chat"),
                     concurrency=concurrency, output_throughput=throughput, request_throughput=1.0,
                     ttft={s: ttft * spread[s] for s in stats}, tpot={s: tpot * spread[s] for s in stats},
                     input_tokens_mean=extra.get("input_tokens"), spec=spec,
                     ignore_eos=extra.get("ignore_eos", False))


def test_the_layout_is_read_by_the_spec_parser_with_npus_and_ratios():
    layout = layout_of(TWO_P_ONE_D)
    assert layout.key == "2P(tp8 dp1) : 1D(tp4 dp4)"
    assert (layout.prefill_instances, layout.decode_instances) == (2, 1)
    assert (layout.prefill_npus, layout.decode_npus, layout.total_npus) == (16, 16, 32)
    assert (layout.ratio_npus, layout.ratio_instances) == ("1:1", "2:1")
    mixed = layout_of(spec_with([(16, 1), (8, 1)], [(4, 4)]))
    assert mixed.key == "1P(tp16 dp1)+1P(tp8 dp1) : 1D(tp4 dp4)" and mixed.ratio_npus == "3:2"
    assert ratio(0, 0) == "0:0" and ratio(48, 16) == "3:1"


def test_an_older_spec_the_parser_refuses_is_read_as_plain_data_and_a_broken_one_is_unreadable():
    older = {**ONE_P_ONE_D, "retired_field": True}  # the current parser names it an unknown field
    assert layout_of(older).key == "1P(tp8 dp1) : 1D(tp4 dp4)"
    broken = {**ONE_P_ONE_D, "instances": [{"role": "prefill", "tp": "eight"}, {"role": "decode", "tp": 4}]}
    with pytest.raises(LayoutUnreadable, match=r"instances\[0\]\.tp: expected a whole number"):
        layout_of(broken)
    with pytest.raises(LayoutUnreadable, match="no decode instance"):
        layout_of({"instances": [{"role": "prefill", "tp": 8}]})
    with pytest.raises(LayoutUnreadable, match="not a mapping"):
        layout_of(["instances"])


def test_the_best_met_run_per_layout_and_the_layout_with_the_most_throughput_per_npu_is_recommended():
    runs = [
        record(TWO_P_ONE_D, throughput=3200, ttft=400, tpot=40, concurrency=16),  # 100/NPU, met
        record(TWO_P_ONE_D, throughput=4800, ttft=900, tpot=45, concurrency=32),  # 150/NPU, TTFT missed
        record(ONE_P_ONE_D, throughput=2640, ttft=450, tpot=48, concurrency=16),  # 110/NPU, met
        record(ONE_P_ONE_D, throughput=1200, ttft=200, tpot=30, concurrency=4),  # 50/NPU, met
    ]
    advice = advise(runs, Targets(ttft_ms=500, tpot_ms=50, stat="p90"), None)
    best = advice.recommendation
    assert best.layout.key == "1P(tp8 dp1) : 1D(tp4 dp4)" and best.best.record is runs[2]
    assert best.best.per_npu == pytest.approx(110.0)
    other = advice.layouts[1]
    assert other.best.record is runs[0] and other.best.per_npu == pytest.approx(100.0)
    missed = next(p for p in other.points if p.record is runs[1])
    assert missed.meets is False and missed.misses == ("TTFT p90 900.0 ms > 500 ms (+80%)",)
    assert [p.record.concurrency for p in best.points] == [4, 16]
    assert advice.runs == 4
    assert advice.text.startswith("From 4 measured runs on 2 layouts: 1P(tp8 dp1) : 1D(tp4 dp4) (P:D 1:2 by NPUs, "
                                  "1:1 by instances)")
    assert "110.0 token/s per NPU at concurrency 16" in advice.text and f"run #{runs[2].run_id}" in advice.text
    assert "TTFT p90 ≤ 500 ms and TPOT p90 ≤ 50 ms" in advice.text


def test_the_statistic_changes_the_verdict():
    run = record(ONE_P_ONE_D, throughput=2400, ttft=480, tpot=30)  # p99 = 1.3 x p90 = 624 ms
    assert advise([run], Targets(500, 50, "p90"), None).recommendation is not None
    at_p99 = advise([run], Targets(500, 50, "p99"), None)
    assert at_p99.recommendation is None
    assert at_p99.layouts[0].closest_miss.misses == ("TTFT p99 624.0 ms > 500 ms (+25%)",)
    assert advise([run], Targets(500, 50, "mean"), None).layouts[0].best.ttft_ms == pytest.approx(384.0)


def test_no_layout_meets_the_target_names_the_closest_miss():
    runs = [record(TWO_P_ONE_D, throughput=3200, ttft=800, tpot=40, concurrency=8),  # TTFT 1.6x
            record(ONE_P_ONE_D, throughput=2400, ttft=300, tpot=60, concurrency=8),  # TPOT 1.2x: closer
            record(ONE_P_ONE_D, throughput=2600, ttft=300, tpot=75, concurrency=16)]  # TPOT 1.5x
    advice = advise(runs, Targets(500, 50), None)
    assert advice.recommendation is None and all(a.best is None for a in advice.layouts)
    assert advice.layouts[0].closest_miss.record is runs[1]
    assert advice.layouts[1].closest_miss.record is runs[0]
    assert advice.text.startswith("No measured layout meets the target (TTFT p90 ≤ 500 ms and TPOT p90 ≤ 50 ms), "
                                  "judged from 3 measured runs on 2 layouts.")
    assert f"run #{runs[1].run_id} at concurrency 8 (TPOT p90 60.0 ms > 50 ms (+20%))" in advice.text


def test_ties_go_to_the_lower_ttft_then_the_older_run():
    a = record(ONE_P_ONE_D, throughput=2400, ttft=300, tpot=40, run_id=901)
    b = record(ONE_P_ONE_D, throughput=2400, ttft=250, tpot=45, run_id=902)
    c = record(ONE_P_ONE_D, throughput=2400, ttft=250, tpot=45, run_id=903)
    assert advise([a, c, b], Targets(500, 50), None).recommendation.best.record is b
    # two layouts with the same best throughput per NPU: the lower TTFT wins across layouts too
    d = record(ONE_P_TWO_D, throughput=4800, ttft=200, tpot=45, run_id=904)  # 4800 / 48 = 100 = 2400 / 24
    advice = advise([a, b, c, d], Targets(500, 50), None)
    assert advice.recommendation.best.record is d and advice.layouts[1].best.record is b


def test_a_statistic_not_stored_is_not_judged_and_no_target_means_no_limit():
    run = record(ONE_P_ONE_D, throughput=2400, ttft=300, tpot=40, stats=("avg", "p90"))
    advice = advise([run], Targets(500, 50, "p99"), None)
    point = advice.layouts[0].points[0]
    assert point.meets is None and point.misses == ("TTFT p99 not in this run's results (it has mean, p90)",
                                                    "TPOT p99 not in this run's results (it has mean, p90)")
    assert advice.recommendation is None and advice.layouts[0].closest_miss is None and advice.layouts[0].unjudged == 1
    unlimited = advise([run], Targets(None, None, "p99"), None)
    assert unlimited.recommendation.best.record is run and "no latency target" in unlimited.text
    only_tpot = advise([run], Targets(None, 30, "p90"), None)
    assert only_tpot.recommendation is None and only_tpot.layouts[0].closest_miss.misses == (
        "TPOT p90 40.0 ms > 30 ms (+33%)",)


def test_p50_and_p95_can_be_picked_and_a_run_without_the_statistic_says_which_it_has():
    full = record(ONE_P_ONE_D, throughput=2400, ttft=300, tpot=40)  # avg, median, p90, p99
    p95_only = replace(record(TWO_P_ONE_D, throughput=6400, ttft=1, tpot=1),
                       ttft={"unit": "ms", "avg": 250.0, "p50": 240.0, "p95": 400.0, "n": 6},
                       tpot={"unit": "ms", "avg": 30.0, "p50": 29.0, "p95": 45.0, "n": 6})
    at_p90 = advise([full, p95_only], Targets(500, 50, "p90"), None)
    unjudged = next(p for a in at_p90.layouts for p in a.points if p.record is p95_only)
    assert unjudged.meets is None and (unjudged.ttft_ms, unjudged.tpot_ms) == (None, None)
    assert unjudged.misses == ("TTFT p90 not in this run's results (it has mean, median, p50, p95)",
                               "TPOT p90 not in this run's results (it has mean, median, p50, p95)")
    assert at_p90.recommendation.best.record is full
    assert at_p90.text.endswith(f"Not judged: #{p95_only.run_id}, whose results have no p90 for a targeted "
                                "latency; pick a statistic they have.")
    at_p95 = advise([full, p95_only], Targets(500, 50, "p95"), None)
    assert at_p95.recommendation.best.record is p95_only and at_p95.recommendation.best.ttft_ms == 400.0
    assert f"Not judged: #{full.run_id}," in at_p95.text
    median = advise([full, p95_only], Targets(500, 50, "median"), None)  # one statistic, stored as median or p50
    assert {p.ttft_ms for a in median.layouts for p in a.points} == {225.0, 240.0}
    assert parse_query({"stat": "p95"})[0].stat == "p95" and parse_query({"stat": "p50"})[0].stat == "p50"


def test_no_runs_and_unreadable_specs():
    empty = advise([], Targets(500, 50), None)
    assert empty.layouts == [] and empty.recommendation is None and empty.text.startswith("No measured runs")
    bad = record({"instances": "none"}, throughput=2400, ttft=100, tpot=10)
    good = record(ONE_P_ONE_D, throughput=2400, ttft=100, tpot=10)
    no_throughput = record(ONE_P_ONE_D, throughput=None, ttft=100, tpot=10)
    advice = advise([bad, good, no_throughput], Targets(500, 50), None)
    assert [u.record for u in advice.unreadable] == [bad]
    assert advice.unreadable[0].reason == "the spec copy has no list of instances"
    assert advice.runs == 1 and "From 1 measured run on 1 layout:" in advice.text


def test_only_like_is_compared_with_like():
    a = record(ONE_P_ONE_D, throughput=2400, ttft=100, tpot=10, input_tokens=120.0)
    b = record(TWO_P_ONE_D, throughput=9000, ttft=100, tpot=10, max_out_len=512)  # better, other output length
    c = record(TWO_P_ONE_D, throughput=9000, ttft=100, tpot=10, model="other-model")
    d = record(TWO_P_ONE_D, throughput=1600, ttft=100, tpot=10, api_style="completions", input_tokens=130.0)
    groups = groups_of([a, b, c, d])
    assert groups[0].key == group_of(a) and groups[0].runs == 2
    assert groups[0].api_styles == ("chat", "completions") and groups[0].input_tokens == (120.0, 130.0)
    assert {g.key.text for g in groups[1:]} == {"qwen3-235b|catalogue:gsm8k|512", "other-model|catalogue:gsm8k|2048"}
    advice = advise([a, b, c, d], Targets(500, 50), group_of(a))
    assert advice.runs == 2 and advice.recommendation.best.record is a  # b and c, better, are other workloads


def test_a_fixed_output_length_is_never_compared_with_answers_that_stop_where_the_model_ends_them():
    natural = record(ONE_P_ONE_D, throughput=2400, ttft=100, tpot=10, max_out_len=1500)
    fixed = record(TWO_P_ONE_D, throughput=9000, ttft=100, tpot=10, max_out_len=1500, ignore_eos=True)
    fixed_too = record(ONE_P_ONE_D, throughput=3000, ttft=100, tpot=10, max_out_len=1500, ignore_eos=True)
    groups = groups_of([natural, fixed, fixed_too])
    assert [(g.key.text, g.key.output_text, g.runs) for g in groups] == [
        ("qwen3-235b|catalogue:gsm8k|fixed:1500", "fixed 1500 tokens", 2),
        ("qwen3-235b|catalogue:gsm8k|1500", "up to 1500 tokens", 1)]
    up_to = advise([natural, fixed, fixed_too], Targets(500, 50), group_of(natural))
    assert up_to.runs == 1 and up_to.recommendation.best.record is natural  # the fixed 9000 token/s is not in it
    fixed_advice = advise([natural, fixed, fixed_too], Targets(500, 50), group_of(fixed))
    assert fixed_advice.runs == 2 and fixed_advice.recommendation.best.record is fixed
    assert GroupKey.parse(groups[0].key.text) == group_of(fixed) != group_of(natural)
    assert GroupKey.parse(groups[1].key.text) == group_of(natural)


def test_parameters_are_checked_and_each_bad_one_is_named():
    targets, group = parse_query({"ttft_ms": "500", "tpot_ms": "", "stat": "p99",
                                  "group": "org/model|v2|upload:my-set|1024"})
    assert targets == Targets(500.0, None, "p99")
    assert group == GroupKey("org/model|v2", "upload:my-set", 1024) and not group.fixed_length
    assert parse_query({"group": "m|catalogue:gsm8k|fixed:1500"})[1] == GroupKey("m", "catalogue:gsm8k", 1500, True)
    for bad in ("m|d|fixed:", "m|d|fixed:-1", "m|d|fixed1500", "m|d|up to 1500"):
        with pytest.raises(BadAdvisorQuery) as caught:
            parse_query({"group": bad})
        assert "fixed:<max_out_len>" in caught.value.errors["group"]
    assert parse_query({}) == (Targets(None, None, "p90"), None)
    with pytest.raises(BadAdvisorQuery) as caught:
        parse_query({"ttft_ms": "fast", "tpot_ms": "-1", "stat": "p42", "group": "no-length"})
    assert set(caught.value.errors) == {"ttft_ms", "tpot_ms", "stat", "group"}
    assert "'fast'" in caught.value.errors["ttft_ms"] and "p90" in caught.value.errors["stat"]
    for value in ("nan", "inf", "0", "1e12"):
        with pytest.raises(BadAdvisorQuery, match="ttft_ms"):
            parse_query({"ttft_ms": value})
