"""Parsing recorded AISBench output folders (tests/evals/fixtures, made by its record.py) and refusing bad ones."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from apps.evals.aisbench.output_parser import (
    OutputError,
    latest_run_dir,
    parse_accuracy,
    parse_performance,
)

FIXTURES = Path(__file__).parent / "fixtures"


def run_of(case: str) -> Path:
    run = latest_run_dir(FIXTURES / case / "work")
    assert run is not None
    return run


@pytest.fixture
def copy_of(tmp_path):
    def copy(case: str) -> Path:
        shutil.copytree(FIXTURES / case / "work", tmp_path / case)
        return latest_run_dir(tmp_path / case)

    return copy


def test_the_latest_run_folder_is_the_newest_timestamp(tmp_path):
    for name in ("20261201_101500", "20261201_101459", "20261201_1015000", "logs"):
        (tmp_path / name).mkdir()
    assert latest_run_dir(tmp_path) == tmp_path / "20261201_101500"
    assert latest_run_dir(tmp_path / "none") is None
    assert latest_run_dir(FIXTURES / "accuracy_ok" / "work").name.startswith("2026")


def test_accuracy_scores_and_samples_joined_with_predictions():
    (result,) = parse_accuracy(run_of("accuracy_ok"))
    assert (result.model, result.dataset, result.scores, result.score) == ("mock-chat", "aime4", {"accuracy": 75.0}, 75.0)
    assert [s.id for s in result.samples] == [0, 1, 2, 3] and result.failed == []
    wrong = result.samples[2]
    assert wrong.prompt.startswith("How many ordered pairs") and wrong.prompt.endswith("\\boxed{}.")
    assert wrong.response == "Let me think step by step. The final answer is \\boxed{48}."
    assert (wrong.extracted, wrong.references, wrong.correct, wrong.is_correct, wrong.success) == (
        ["48"], ["49"], [False], False, True)
    assert [s.is_correct for s in result.samples] == [True, True, False, True]


def test_failed_requests_show_as_failed_wrong_samples():
    (result,) = parse_accuracy(run_of("accuracy_failed_requests"))
    assert result.score == 25.0
    assert [(f.id, f.error) for f in result.failed] == [(1, "Internal Server Error"), (3, "Internal Server Error")]
    assert "<<fail>>" in result.failed[0].prompt
    assert [(s.id, s.success, s.is_correct, s.response) for s in result.samples if not s.success] == [
        (1, False, False, ""), (3, False, False, "")]


def test_a_failed_task_has_no_score_and_no_samples():
    (result,) = parse_accuracy(run_of("endpoint_down"))
    assert (result.scores, result.score, result.samples) == ({"accuracy": None}, None, [])


def test_performance_metrics_distributions_and_requests():
    (perf,) = parse_performance(run_of("perf_ok"))
    assert (perf.model, perf.dataset) == ("mock-chat", "synthetic6")
    metrics = {name: (q.value, q.unit) for name, q in perf.metrics.items()}
    assert metrics["Total Requests"] == (6, None) and metrics["Failed Requests"] == (0, None)
    assert metrics["Benchmark Duration"][1] == "ms" and metrics["Benchmark Duration"][0] > 0
    assert metrics["Output Token Throughput"][1] == "token/s" and metrics["Request Throughput"][1] == "req/s"
    assert set(perf.metrics_by_stage) == {"total"}
    assert [d.metric for d in perf.distributions] == ["E2EL", "TTFT", "TPOT", "ITL", "InputTokens", "OutputTokens",
                                                      "OutputTokenThroughput"]
    ttft, tokens = perf.distribution("TTFT"), perf.distribution("OutputTokens")
    assert list(ttft.stats) == ["avg", "min", "max", "median", "p75", "p90", "p99"]
    assert ttft.unit == "ms" and ttft.n == 6
    assert ttft.stats["min"] <= ttft.stats["median"] <= ttft.stats["p99"] <= ttft.stats["max"]
    assert tokens.unit is None and tokens.stats["avg"] == tokens.stats["max"] == 8.0  # the mock stops at max_out_len
    assert perf.distribution("OutputTokenThroughput").unit == "token/s"
    assert perf.distribution("TTFT", "steady") is None
    assert [r.id for r in perf.requests] == list(range(6))
    assert all(r.success and r.input_tokens == 16 and r.output_tokens == 8 for r in perf.requests)
    assert min(r.start_ms for r in perf.requests) == 0.0
    e2el = perf.distribution("E2EL")
    for row in perf.requests:  # the time points in db_data agree with AISBench's own E2EL and TTFT
        assert e2el.stats["min"] - 0.1 <= row.latency_ms <= e2el.stats["max"] + 0.1
        assert 0 < row.ttft_ms <= row.latency_ms


def test_all_failed_perf_has_requests_but_no_metrics():
    (perf,) = parse_performance(run_of("perf_all_failed"))
    assert perf.metrics == {} and perf.distributions == []
    assert [(r.success, r.error, r.latency_ms) for r in perf.requests] == [(False, "Internal Server Error", None)] * 4
    assert len(perf.failed) == 4


def test_time_units_are_normalised_to_ms(copy_of):
    run = copy_of("perf_ok")
    csv = run / "performances" / "mock-chat" / "synthetic6.csv"
    csv.write_text("Performance Parameters,Stage,Average,Min,Max,Median,P75,P90,P99,N\n"
                   "TTFT,total,1.5 s,1 s,2 s,1.5 s,1.8 s,1.9 s,2 s,3\nITL,total,500 us,1 us,2 us,3 us,4 us,5 us,6 us,3\n")
    (perf,) = parse_performance(run)
    assert (perf.distribution("TTFT").stats["avg"], perf.distribution("TTFT").unit) == (1500.0, "ms")
    assert perf.distribution("ITL").stats["avg"] == pytest.approx(0.5)


def corrupt(path: Path, old: str | None, new: str) -> None:
    text = path.read_text()
    assert old is None or old in text
    path.write_text(new if old is None else text.replace(old, new, 1))


ACCURACY_DAMAGE = [
    ("results/mock-chat/aime4.json", lambda t: t[: len(t) // 2], "results/mock-chat/aime4.json:line"),
    ("results/mock-chat/aime4.json", lambda t: t.replace('"correct": [\n                true', '"correct": [\n"yes"', 1),
     "'correct' holds"),
    ("results/mock-chat/aime4.json", lambda t: t.replace('"references"', '"refs"', 1), "has no 'references'"),
    ("summary/*.csv", lambda t: t.replace("75.00", "n/a"), ".csv:line 2, column mock-chat: 'n/a' is not a number"),
    ("summary/*.csv", lambda t: t.replace("metric,", "metrik,"), ".csv:line 1: missing column(s) metric"),
    ("summary/*.csv", lambda t: t.rstrip("\n") + ",extra\n", ".csv:line 2: has a different number of cells"),
    ("predictions/mock-chat/aime4.jsonl", lambda t: t[:-40], "aime4.jsonl:line 4: not valid JSON"),
    ("predictions/mock-chat/aime4.jsonl", lambda t: re.sub(r'"id": (\d+)', r'"id": "\1"', t, count=1),
     "aime4.jsonl:line 1: 'id' is str, not int"),
]


@pytest.mark.parametrize(("pattern", "damage", "message"), ACCURACY_DAMAGE, ids=[d[2] for d in ACCURACY_DAMAGE])
def test_damaged_accuracy_files_raise_output_error_naming_file_and_place(copy_of, pattern, damage, message):
    run = copy_of("accuracy_ok")
    (path,) = run.glob(pattern)
    path.write_text(damage(path.read_text()))
    with pytest.raises(OutputError) as caught:
        parse_accuracy(run)
    assert message in str(caught.value) and str(path.parent) in caught.value.path


PERF_DAMAGE = [
    ("synthetic6.json", lambda t: t[:-5], "synthetic6.json:line"),
    ("synthetic6.json", lambda t: t.replace('"total": 6', '"total": "six"', 1), "Total Requests.total: 'six' is not"),
    ("synthetic6.csv", lambda t: t.replace("Stage,", "Stag,"), "synthetic6.csv:line 1: missing column(s) Stage"),
    ("synthetic6.csv", lambda t: "Performance Parameters,Stage,N\nE2EL,total,6\n",
     "synthetic6.csv:line 2: has no statistic column"),
    ("synthetic6.csv", lambda t: t.replace("total,", "total,fast,", 1).replace(",P99,N", ",P99,N,X"),
     "synthetic6.csv:line 2, column Average: 'fast' is not a number"),
    ("synthetic6.csv", lambda t: t.replace(" ms,", " token/s,", 1), "synthetic6.csv:line 2: mixes units"),
    ("synthetic6.csv", lambda t: t.replace(",6\n", ",6.5\n", 1), "synthetic6.csv:line 2, column N: '6.5' is not a count"),
    ("synthetic6_details.jsonl", lambda t: t[:-20], "synthetic6_details.jsonl:line 6: not valid JSON"),
    ("synthetic6_details.jsonl", lambda t: t.replace('"output_tokens": 8', '"output_tokens": null', 1),
     "synthetic6_details.jsonl:line 1: 'output_tokens' is NoneType, not int"),
    ("synthetic6_details.jsonl", lambda t: t.replace('"success": true', '"success": 1', 1),
     "synthetic6_details.jsonl:line 1: 'success' is int, not bool"),
]


@pytest.mark.parametrize(("name", "damage", "message"), PERF_DAMAGE, ids=[d[2] for d in PERF_DAMAGE])
def test_damaged_perf_files_raise_output_error_naming_file_and_place(copy_of, name, damage, message):
    run = copy_of("perf_ok")
    path = run / "performances" / "mock-chat" / name
    path.write_text(damage(path.read_text()))
    with pytest.raises(OutputError) as caught:
        parse_performance(run)
    assert message in str(caught.value)


def test_a_damaged_time_point_database_names_its_row(copy_of):
    run = copy_of("perf_ok")
    (db,) = run.glob("performances/mock-chat/db_data/*.db")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE numpy_store SET arr_blob = ? WHERE id = 3", (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'",))
    with pytest.raises(OutputError, match=r"\.db:numpy_store row 3: "):
        parse_performance(run)
    db.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(OutputError, match=r"\.db:numpy_store: cannot be read"):
        parse_performance(run)


def test_without_the_time_point_database_requests_have_no_timing(copy_of):
    run = copy_of("perf_ok")
    shutil.rmtree(run / "performances" / "mock-chat" / "db_data")
    (perf,) = parse_performance(run)
    assert {(r.start_ms, r.latency_ms, r.ttft_ms) for r in perf.requests} == {(None, None, None)}
    assert perf.requests[0].output_tokens == 8


def test_an_accuracy_run_without_a_summary_is_an_output_error(copy_of):
    run = copy_of("accuracy_ok")
    shutil.rmtree(run / "summary")
    with pytest.raises(OutputError, match="summary: has no summary_"):
        parse_accuracy(run)
