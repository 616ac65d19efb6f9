"""What a run stores (issue 34, part 1): every model, dataset, stage and metric, keyed; the headline is one
(model, dataset)'s figures, never a mean across models; a "both" run's passes fill the same entries; a run stored
before results existed still reads as one entry."""

from pathlib import Path

import pytest

from apps.evals.aisbench.output_parser import (
    DatasetAccuracy,
    DatasetPerformance,
    Distribution,
    Quantity,
    judge,
)
from apps.evals.models import EvalRun
from apps.evals.result_tables import accuracy_rows, performance_sections
from apps.evals.results import (
    clear_pass_results,
    entries_of,
    store_accuracy,
    store_pass_results,
    store_performance,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(deployment, make_user):
    revision = deployment.active_revision
    return EvalRun.objects.create(
        deployment=deployment, deployment_name=deployment.name, revision=revision, revision_number=revision.number,
        revision_spec=revision.spec, endpoint_url="http://127.0.10.234:1999/", served_model="m", mode="both",
        dataset_key="catalogue:made-up-aime", dataset_abbr="made_up_aime", dataset_family="aime",
        status="running")


def perf(model: str, dataset: str, stage: str = "stable", throughput: float = 100.0) -> DatasetPerformance:
    return DatasetPerformance(
        model, dataset,
        metrics_by_stage={stage: {"Output Token Throughput": Quantity(throughput, "token/s"),
                                  "Prefill Token Throughput": Quantity(5.0, "token/s")}},
        distributions=[Distribution("TTFT", stage, "ms", {"avg": 10.0, "median": 9.0, "p95": 20.0}, 8)],
        requests=[], failed=[])


def test_two_models_keep_their_own_scores_and_the_headline_is_the_first_never_a_mean(run):
    store_accuracy(run, [DatasetAccuracy("model-a", "gsm8k", {"accuracy": 90.0}),
                         DatasetAccuracy("model-b", "gsm8k", {"accuracy": 50.0}, counts={"accuracy": (1, 2)}),
                         DatasetAccuracy("model-a", "aime", {"accuracy": 30.0})])
    run.refresh_from_db()
    assert [(e["model"], e["dataset"], e["accuracy"]["score"]) for e in run.results] == [
        ("model-a", "gsm8k", 90.0), ("model-b", "gsm8k", 50.0), ("model-a", "aime", 30.0)]
    assert run.accuracy == 90.0  # model-a on gsm8k: not (90 + 50 + 30) / 3
    assert set(run.accuracy_detail) == {"gsm8k", "aime"} and run.accuracy_detail["gsm8k"]["accuracy"] == 90.0
    assert run.results[1]["accuracy"]["counts"] == {"accuracy": [1, 2]}
    assert (run.results[1]["accuracy"]["correct"], run.results[1]["accuracy"]["total"]) == (1, 2)
    rows = accuracy_rows(run)
    assert [(r["model"], r["dataset"], r["score"]) for r in rows] == [
        ("model-a", "gsm8k", "90"), ("model-b", "gsm8k", "50"), ("model-a", "aime", "30")]
    assert rows[1]["metrics"][0]["count"] == "1/2"


def test_four_datasets_and_a_stable_stage_keep_every_figure_with_the_file_percentiles(run):
    store_performance(run, [perf("m", f"ds{i}", throughput=100.0 + i) for i in range(4)])
    run.refresh_from_db()
    assert [e["dataset"] for e in run.results] == ["ds0", "ds1", "ds2", "ds3"]
    assert [e["performance"]["summary"]["stable"]["output_token_throughput"] for e in run.results] == [
        100.0, 101.0, 102.0, 103.0]
    assert run.perf_summary == {"output_token_throughput": 100.0}
    assert run.perf_percentiles == {"TTFT": {"unit": "ms", "avg": 10.0, "median": 9.0, "p95": 20.0, "n": 8}}
    section = performance_sections(run)[3]
    [stage] = section["stages"]
    assert (section["dataset"], stage["name"], stage["headline"]) == ("ds3", "stable", True)
    assert stage["columns"] == ["avg", "median", "p95", "N"] and stage["rows"][0]["cells"] == ["10", "9", "20", "8"]
    assert stage["other_metrics"] == [("Prefill Token Throughput", "5", "token/s")]


def test_a_both_run_fills_one_entry_and_clearing_a_pass_keeps_the_other(run):
    store_accuracy(run, [DatasetAccuracy("m", "made_up_aime", {"accuracy": 75.0})])
    store_performance(run, [perf("m", "made_up_aime", stage="total")])
    run.refresh_from_db()
    [entry] = run.results
    assert entry["accuracy"]["score"] == 75.0 and entry["performance"]["headline_stage"] == "total"
    clear_pass_results(run, "performance")
    run.refresh_from_db()
    assert [e["performance"] for e in run.results] == [None] and run.accuracy == 75.0 and run.perf_summary == {}
    clear_pass_results(run, "accuracy")
    run.refresh_from_db()
    assert run.results == [] and run.accuracy is None


def test_a_run_stored_before_results_existed_reads_as_one_entry(run):
    EvalRun.objects.filter(pk=run.pk).update(
        accuracy=66.67, accuracy_detail={"made_up_aime": {"accuracy": 66.67, "correct": 2, "total": 3, "failed": 0}},
        perf_summary={"output_token_throughput": 12.5}, perf_percentiles={"TTFT": {"unit": "ms", "p90": 4.0}})
    run.refresh_from_db()
    [entry] = entries_of(run)
    assert (entry["model"], entry["dataset"]) == ("m", "made_up_aime")
    assert (entry["accuracy"]["score"], entry["accuracy"]["correct"], entry["accuracy"]["total"]) == (66.67, 2, 3)
    assert entry["performance"]["summary"]["total"] == {"output_token_throughput": 12.5}


FORMS = Path(__file__).parent / "fixtures" / "forms"  # written by AISBench's own summarizers: forms/record.py


def run_folder(form: str) -> Path:
    [folder] = (FORMS / form / "work").iterdir()
    return folder


def test_a_stable_stage_run_with_p95_columns_is_stored_and_judged_succeeded(run):
    folder = run_folder("stable_p95")
    assert judge(folder.parent, "performance").ok
    store_pass_results(run, "performance", folder)
    run.refresh_from_db()
    [entry] = run.results
    assert entry["performance"]["headline_stage"] == "stable" and entry["performance"]["stages"] == ["stable"]
    assert run.perf_summary["output_token_throughput"] > 0 and len(run.perf_requests) > 0
    assert {"p50", "p95"} <= set(run.perf_percentiles["TTFT"]) and "p90" not in run.perf_percentiles["TTFT"]


def test_a_two_model_and_a_four_dataset_run_keep_every_figure(run):
    store_pass_results(run, "accuracy", run_folder("two_models"))
    store_pass_results(run, "performance", run_folder("four_datasets"))
    run.refresh_from_db()
    scores = {(e["model"], e["dataset"]): e["accuracy"]["score"] for e in run.results if e["accuracy"]}
    assert scores == {("vllm-pd-a", "gsm8k"): 91.31, ("vllm-pd-b", "gsm8k"): 88.75,
                      ("vllm-pd-a", "aime2025"): 26.67, ("vllm-pd-b", "aime2025"): None}
    assert run.accuracy == 91.31
    perf = {e["dataset"]: e["performance"] for e in run.results if e["performance"]}
    assert sorted(perf) == ["aime2025", "gsm8k", "math500", "synthetic_1k"]
    for figures in perf.values():
        assert figures["summary"]["total"]["output_token_throughput"] > 0
        assert {"TTFT", "TPOT", "ITL", "E2EL"} <= set(figures["percentiles"]["total"])
