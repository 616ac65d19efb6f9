"""What a finished pass measured, stored on the run in the shapes pages, charts, compare and the API read."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from .aisbench.output_parser import DatasetAccuracy, DatasetPerformance, parse_accuracy, parse_performance
from .models import EvalRun, EvalSample

MAX_TEXT = 20_000  # a stored prediction or question is cut here (the full text stays in the output folder)
# The keys of AISBench's <dataset>.json "total" stage, as stored in perf_summary
SUMMARY_KEYS = {
    "Total Requests": "requests_total",
    "Success Requests": "requests_succeeded",
    "Failed Requests": "requests_failed",
    "Benchmark Duration": "duration_ms",
    "Request Throughput": "request_throughput",
    "Total Input Tokens": "input_tokens_total",
    "Total Generated Tokens": "output_tokens_total",
    "Input Token Throughput": "input_token_throughput",
    "Output Token Throughput": "output_token_throughput",
    "Total Token Throughput": "total_token_throughput",
    "Concurrency": "concurrency_avg",
    "Max Concurrency": "concurrency_max",
}
STATS = (("average", "avg"), ("min", "min"), ("max", "max"), ("median", "median"), ("p75", "p75"), ("p90", "p90"),
         ("p99", "p99"), ("n", "n"))


def clear_pass_results(run: EvalRun, pass_name: str) -> None:
    if pass_name == "accuracy":
        EvalSample.objects.filter(run=run).delete()
        EvalRun.objects.filter(pk=run.pk).update(accuracy=None, accuracy_detail={})
        run.accuracy, run.accuracy_detail = None, {}
    else:
        EvalRun.objects.filter(pk=run.pk).update(perf_summary={}, perf_percentiles={}, perf_requests=[])
        run.perf_summary, run.perf_percentiles, run.perf_requests = {}, {}, []


def store_pass_results(run: EvalRun, pass_name: str, run_dir: Path) -> None:
    if pass_name == "accuracy":
        _store_accuracy(run, parse_accuracy(run_dir))
    else:
        _store_performance(run, parse_performance(run_dir))


def _score(result: DatasetAccuracy) -> float | None:
    if "accuracy" in result.scores:
        return result.scores["accuracy"]
    return next((v for v in result.scores.values() if v is not None), None)


@transaction.atomic
def _store_accuracy(run: EvalRun, results: list[DatasetAccuracy]) -> None:
    detail, samples = {}, []
    for result in results:
        correct = sum(1 for s in result.samples if s.correct and all(s.correct))
        detail[result.dataset] = {"accuracy": _score(result), "correct": correct, "total": len(result.samples),
                                  "failed": sum(1 for s in result.samples if not s.success)}
        for s in result.samples:
            samples.append(EvalSample(
                run=run, index=s.id, question=s.prompt[:MAX_TEXT], prediction=s.response[:MAX_TEXT],
                extracted=", ".join(s.extracted)[:500], reference=", ".join(s.references)[:500],
                correct=bool(s.correct) and all(s.correct), failed=not s.success,
                error=next((f.error for f in result.failed if f.id == s.id), "")[:MAX_TEXT]))
    EvalSample.objects.filter(run=run).delete()
    EvalSample.objects.bulk_create(samples)
    scores = [d["accuracy"] for d in detail.values() if d["accuracy"] is not None]
    run.accuracy = sum(scores) / len(scores) if scores else None
    run.accuracy_detail = detail
    EvalRun.objects.filter(pk=run.pk).update(accuracy=run.accuracy, accuracy_detail=detail)


def _store_performance(run: EvalRun, results: list[DatasetPerformance]) -> None:
    if not results:
        return
    result = results[0]  # one dataset per run
    summary = {key: result.metrics[name].value for name, key in SUMMARY_KEYS.items() if name in result.metrics}
    percentiles = {}
    for dist in result.distributions:
        if dist.stage != "total":
            continue
        percentiles[dist.metric] = {"unit": dist.unit or "", **{out: getattr(dist, attr) for attr, out in STATS}}
    requests = [{"i": r.id, "success": r.success, "start_ms": r.start_ms, "ttft_ms": r.ttft_ms,
                 "e2el_ms": r.latency_ms, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens}
                for r in result.requests]
    run.perf_summary, run.perf_percentiles, run.perf_requests = summary, percentiles, requests
    EvalRun.objects.filter(pk=run.pk).update(perf_summary=summary, perf_percentiles=percentiles,
                                             perf_requests=requests)
