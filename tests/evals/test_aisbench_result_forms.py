"""Every result form AISBench writes is read, none lost (issue 34, parts 1 and 2): the stable stage, the percentile
columns a stats_list chose, several models and datasets, the total_count column, each cell form. The samples are
AISBench's own output, made by tests/evals/fixtures/forms/record.py with its summarizers and calculators."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from apps.evals.aisbench.cells import Cell, read_cell, read_count
from apps.evals.aisbench.output_parser import (
    DatasetPerformance,
    Distribution,
    OutputError,
    Quantity,
    judge,
    latest_run_dir,
    parse_accuracy,
    parse_performance,
    parse_summary,
)

FORMS = Path(__file__).parent / "fixtures" / "forms"


def run_of(case: str) -> Path:
    run = latest_run_dir(FORMS / case / "work")
    assert run is not None
    return run


def summary_of(case: str, suffix: str) -> Path:
    (path,) = run_of(case).glob(f"summary/summary_*.{suffix}")
    return path


def test_a_stable_stage_run_with_p50_and_p95_keeps_its_stage_and_columns():
    (perf,) = parse_performance(run_of("stable_p95"))
    assert (perf.model, perf.dataset, perf.stages, perf.headline_stage) == ("vllm-pd", "synthetic", ["stable"], "stable")
    assert perf.metrics is perf.metrics_by_stage["stable"]
    assert perf.metrics["Total Requests"] == Quantity(12, None)  # the stable stage: 12 of the 16 requests sent
    assert perf.metrics["Output Token Throughput"] == Quantity(300.5846, "token/s")
    assert len(perf.requests) == 16
    ttft = perf.distribution("TTFT")
    assert ttft == Distribution("TTFT", "stable", "ms", {"avg": 84.0, "min": 44.7, "max": 119.1, "median": 88.0,
                                                          "p50": 88.0, "p95": 117.3}, 12)
    assert perf.distribution("TTFT", "total") is None


def test_a_stable_stage_run_is_judged_ok():
    verdict = judge(FORMS / "stable_p95" / "work", "performance")
    assert (verdict.ok, verdict.reasons) == (True, [])


def test_the_headline_stage_is_total_then_stable_then_the_first():
    def perf(*stages: str) -> DatasetPerformance:
        return DatasetPerformance("m", "d", metrics_by_stage={s: {"Total Requests": Quantity(i, None)}
                                                              for i, s in enumerate(stages)})

    assert (perf("stable", "total").headline_stage, perf("stable", "total").metrics["Total Requests"].value) == (
        "total", 1)
    assert perf("warmup", "stable").headline_stage == "stable"
    assert perf("warmup", "steady").headline_stage == "warmup"
    assert (perf().headline_stage, perf().metrics, perf().stages) == (None, {}, [])
    both = DatasetPerformance("m", "d", metrics_by_stage={"stable": {}},
                              distributions=[Distribution("TTFT", "ramp", "ms", {"avg": 1.0}, 1)])
    assert both.stages == ["stable", "ramp"]  # the json's stages, then the csv's


def test_four_datasets_keep_every_figure():
    results = parse_performance(run_of("four_datasets"))
    assert [(p.model, p.dataset) for p in results] == [
        ("vllm-pd", "aime2025"), ("vllm-pd", "gsm8k"), ("vllm-pd", "math500"), ("vllm-pd", "synthetic_1k")]
    assert [len(p.requests) for p in results] == [6, 8, 5, 8]
    assert [p.metrics["Total Requests"].value for p in results] == [6, 8, 5, 8]
    for perf in results:
        assert perf.stages == ["total"] and len(perf.metrics) == 13
        assert [d.metric for d in perf.distributions] == [
            "E2EL", "TTFT", "TPOT", "ITL", "InputTokens", "OutputTokens", "OutputTokenThroughput"]
        assert all(list(d.stats) == ["avg", "min", "max", "median", "p75", "p90", "p99"] for d in perf.distributions)
    assert judge(FORMS / "four_datasets" / "work", "performance").ok


def test_inf_and_nan_cells_are_no_value_and_keep_their_unit():
    aime = parse_performance(run_of("four_datasets"))[0]
    speed = aime.distribution("OutputTokenThroughput")  # a request answered at once: latency 0, "inf token/s"
    assert speed.unit == "token/s" and speed.n == 6
    assert (speed.stats["avg"], speed.stats["max"], speed.stats["p90"], speed.stats["min"]) == (
        None, None, None, 58.6479)


def test_a_perf_folder_without_details_parses_with_no_requests(tmp_path):
    shutil.copytree(FORMS / "four_datasets" / "work", tmp_path / "work")
    run = latest_run_dir(tmp_path / "work")
    for path in run.glob("performances/vllm-pd/*_details.jsonl"):
        path.unlink()
    shutil.rmtree(run / "performances" / "vllm-pd" / "db_data")
    results = parse_performance(run)
    assert [p.dataset for p in results] == ["aime2025", "gsm8k", "math500", "synthetic_1k"]
    assert all(p.requests == [] and p.metrics and p.distributions for p in results)
    assert judge(tmp_path / "work", "performance").ok


def figures(results) -> list[tuple]:
    return [(r.model, r.dataset, r.scores, r.counts) for r in results]


TWO_MODELS = [("vllm-pd-a", "gsm8k", {"accuracy": 91.31}, {}), ("vllm-pd-b", "gsm8k", {"accuracy": 88.75}, {}),
              ("vllm-pd-a", "aime2025", {"accuracy": 26.67}, {}), ("vllm-pd-b", "aime2025", {"accuracy": None}, {})]


def test_a_two_model_run_keeps_both_models_figures():
    results = parse_accuracy(run_of("two_models"))
    assert figures(results) == TWO_MODELS
    assert [r.score for r in results] == [91.31, 88.75, 26.67, None]


@pytest.mark.parametrize("suffix", ["csv", "md", "txt"])
def test_each_summary_file_form_reads_the_same_figures(suffix):
    assert figures(parse_summary(summary_of("two_models", suffix))) == TWO_MODELS


@pytest.mark.parametrize("suffix", ["csv", "md", "txt"])
def test_the_total_count_column_is_not_a_model_and_counts_are_kept(suffix):
    assert figures(parse_summary(summary_of("total_count", suffix))) == [
        ("vllm-pd", "bfcl_simple", {"accuracy": 0.75}, {"accuracy": (3, 4)}),
        ("vllm-pd", "bfcl_irrelevance", {"accuracy": 1.0}, {"accuracy": (4, 4)}),
        ("vllm-pd", "bfcl_live", {"accuracy": None}, {}),
    ]


@pytest.mark.parametrize("suffix", ["csv", "txt"])  # a tabulate "simple" table named .csv; a "grid" table
def test_harbor_summaries_read_every_metric_of_the_model(suffix):
    (result,) = parse_summary(summary_of("harbor", suffix))
    assert (result.model, result.dataset, result.scores, result.score) == (
        "vllm-pd", "terminal_bench", {"avg_score": 0.65, "n_errors": 1.0}, 0.65)


@pytest.mark.parametrize(("written", "read"), [
    ("-", Cell(None)), ("/", Cell(None)), ("", Cell(None)), ("N/A", Cell(None)), (None, Cell(None)),
    ("75.00 (3/4)", Cell(75.0, None, (3, 4))), ("0.75 (3/4)", Cell(0.75, None, (3, 4))),
    ("1.00 (4/4)", Cell(1.0, None, (4, 4))),
    ("41.2 ms", Cell(41.2, "ms")), ("1.5 s", Cell(1500.0, "ms")), ("500 us", Cell(0.5, "ms")),
    ("16.8 req/s", Cell(16.8, "req/s")), ("195.5216 token/s", Cell(195.5216, "token/s")),
    ("128.0", Cell(128.0)), (6, Cell(6.0)), (1.87, Cell(1.87)),
    ("nan token/s", Cell(None, "token/s")), ("inf token/s", Cell(None, "token/s")), ("nan ms", Cell(None, "ms")),
    (math.nan, Cell(None)), (math.inf, Cell(None)), ("-inf", Cell(None)),
])
def test_each_cell_form(written, read):
    assert read_cell(written, "f.csv", "line 2, column Average") == read


@pytest.mark.parametrize("written", ["fast", True, "75 (3 of 4)", "12 ms ms", "--", "1 (" + "9" * 5000 + "/2)"])
def test_a_bad_cell_names_file_line_and_column(written):
    with pytest.raises(OutputError, match=r"^f\.csv:line 2, column Average: .* is not a number$"):
        read_cell(written, "f.csv", "line 2, column Average")


def test_counts_are_whole_numbers_or_nothing():
    assert (read_count("12", "f", "N"), read_count("-", "f", "N"), read_count("nan", "f", "N")) == (12, None, None)
    with pytest.raises(OutputError, match="f:line 3, column N: '6.5' is not a count"):
        read_count("6.5", "f", "line 3, column N")


def test_a_bad_percentile_cell_names_its_column(tmp_path):
    shutil.copytree(FORMS / "stable_p95" / "work", tmp_path / "work")
    (csv,) = latest_run_dir(tmp_path / "work").glob("performances/vllm-pd/synthetic.csv")
    csv.write_text(csv.read_text().replace("117.3 ms", "117;3 ms"))
    with pytest.raises(OutputError, match=r"synthetic\.csv:line 3, column P95: '117;3 ms' is not a number"):
        parse_performance(csv.parents[2])
