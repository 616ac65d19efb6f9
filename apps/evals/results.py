"""What a finished pass (or an import) measured, stored on the run in the shapes pages, charts, compare and the API
read.

run.results keeps every figure AISBench wrote, one entry per (model, dataset), in the order AISBench wrote them:
    {"model": "pdcp", "dataset": "gsm8k",
     "accuracy": {"scores": {metric: value | None}, "counts": {metric: [correct, total]}, "score": value | None,
                  "correct": n | None, "total": n | None, "failed": n | None} | None,
     "performance": {"headline_stage": "total", "stages": ["total", ...],
                     "summary": {stage: {SUMMARY_KEYS value: number}},
                     "metrics": {stage: {name as written: {"value": number | None, "unit": str | None}}},
                     "percentiles": {stage: {metric: {"unit": str, "avg": ..., "p95": ..., "n": n}}}} | None}
The run's headline fields (accuracy, accuracy_detail, perf_summary, perf_percentiles, perf_requests) hold the first
entry's figures: one (model, dataset), never a mean across models."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from .aisbench.output_parser import DatasetAccuracy, DatasetPerformance, parse_accuracy, parse_performance
from .models import EvalRun, EvalSample

MAX_TEXT = 20_000  # a stored prediction or question is cut here (the full text stays in the output folder)
# The keys of AISBench's <dataset>.json metrics, as stored in a stage's summary and perf_summary
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
PARTS = ("accuracy", "performance")
HEADLINE_FIELDS = ("accuracy", "accuracy_detail", "perf_summary", "perf_percentiles")


def mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def headline_stage(entry: dict, part: str) -> dict:
    """A results entry's performance `part` ("summary" or "percentiles") at its headline stage; {} without one."""
    performance = mapping(entry.get("performance"))
    return mapping(mapping(performance.get(part)).get(performance.get("headline_stage")))


def accuracy_entry(result: DatasetAccuracy) -> dict:
    samples = result.samples
    count = result.counts.get("accuracy") or next(iter(result.counts.values()), None)
    if samples:
        correct, total = sum(1 for s in samples if s.is_correct), len(samples)
        failed = sum(1 for s in samples if not s.success)
    else:
        correct, total = (count if count else (None, None))
        failed = len(result.failed) if result.failed else None
    return {"scores": dict(result.scores), "counts": {m: list(c) for m, c in result.counts.items()},
            "score": result.score, "correct": correct, "total": total, "failed": failed}


def performance_entry(result: DatasetPerformance) -> dict:
    percentiles: dict[str, dict] = {}
    for dist in result.distributions:
        percentiles.setdefault(dist.stage, {})[dist.metric] = {"unit": dist.unit or "", **dist.stats, "n": dist.n}
    return {"headline_stage": result.headline_stage, "stages": result.stages,
            "summary": {stage: {key: metrics[name].value for name, key in SUMMARY_KEYS.items() if name in metrics}
                        for stage, metrics in result.metrics_by_stage.items()},
            "metrics": {stage: {name: {"value": q.value, "unit": q.unit} for name, q in metrics.items()}
                        for stage, metrics in result.metrics_by_stage.items()},
            "percentiles": percentiles}


def entries_of(run: EvalRun) -> list[dict]:
    """run.results; a run stored before results existed reads as one entry built from its headline fields."""
    if run.results:
        return [e for e in run.results if isinstance(e, dict)]
    detail = (run.accuracy_detail or {}).get(run.dataset_abbr)
    counts = {k: detail.get(k) for k in ("correct", "total", "failed")} if isinstance(detail, dict) else {}
    accuracy = {"scores": {"accuracy": run.accuracy}, "counts": {}, "score": run.accuracy, "correct": None,
                "total": None, "failed": None, **counts} if run.accuracy is not None else None
    performance = None
    if run.perf_summary or run.perf_percentiles:
        performance = {"headline_stage": "total", "stages": ["total"], "summary": {"total": run.perf_summary or {}},
                       "metrics": {}, "percentiles": {"total": run.perf_percentiles or {}}}
    if accuracy is None and performance is None:
        return []
    return [{"model": run.served_model, "dataset": run.dataset_abbr, "accuracy": accuracy,
             "performance": performance}]


def merge_entries(entries: list[dict], part: str, new: dict[tuple[str, str], dict]) -> list[dict]:
    """entries with `part` replaced by new[(model, dataset)] (an entry left with neither part goes)."""
    out = [{**e, part: None} for e in entries if isinstance(e, dict)]
    by_key = {(e.get("model"), e.get("dataset")): e for e in out}
    for (model, dataset), figures in new.items():
        if (model, dataset) not in by_key:
            by_key[(model, dataset)] = {"model": model, "dataset": dataset, "accuracy": None, "performance": None}
            out.append(by_key[(model, dataset)])
        by_key[(model, dataset)][part] = figures
    return [e for e in out if any(e.get(p) for p in PARTS)]


def headline(entries: list[dict]) -> dict:
    """The run's headline fields from its entries: the first entry's figures."""
    first_acc = next((e for e in entries if e.get("accuracy")), None)
    first_perf = next((e for e in entries if e.get("performance")), None)
    out = {"accuracy": None, "accuracy_detail": {}, "perf_summary": {}, "perf_percentiles": {}}
    if first_acc:
        out["accuracy"] = first_acc["accuracy"].get("score")
        out["accuracy_detail"] = {
            e["dataset"]: {"accuracy": e["accuracy"].get("score"), **{k: e["accuracy"].get(k)
                                                                      for k in ("correct", "total", "failed")}}
            for e in entries if e.get("accuracy") and e.get("model") == first_acc["model"]}
    if first_perf:
        out["perf_summary"] = headline_stage(first_perf, "summary")
        out["perf_percentiles"] = headline_stage(first_perf, "percentiles")
    return out


def request_rows(result: DatasetPerformance) -> list[dict]:
    return [{"i": r.id, "success": r.success, "start_ms": r.start_ms, "ttft_ms": r.ttft_ms, "e2el_ms": r.latency_ms,
             "input_tokens": r.input_tokens, "output_tokens": r.output_tokens} for r in result.requests]


def sample_rows(run: EvalRun, results: list[DatasetAccuracy]) -> list[EvalSample]:
    rows = []
    for result in results:
        errors = {f.id: f.error for f in result.failed}
        for s in result.samples:
            rows.append(EvalSample(
                run=run, model=result.model[:200], dataset=result.dataset[:200], index=s.id,
                question=s.prompt[:MAX_TEXT], prediction=s.response[:MAX_TEXT],
                extracted=", ".join(s.extracted)[:500], reference=", ".join(s.references)[:500],
                correct=s.is_correct, failed=not s.success, error=errors.get(s.id, "")[:MAX_TEXT]))
    return rows


def _save(run: EvalRun, entries: list[dict], **extra) -> None:
    fields = {"results": entries, **headline(entries), **extra}
    for name, value in fields.items():
        setattr(run, name, value)
    EvalRun.objects.filter(pk=run.pk).update(**fields)


def clear_pass_results(run: EvalRun, pass_name: str) -> None:
    extra = {} if pass_name == "accuracy" else {"perf_requests": []}
    if pass_name == "accuracy":
        EvalSample.objects.filter(run=run).delete()
    _save(run, merge_entries(run.results or [], pass_name, {}), **extra)


@transaction.atomic
def store_accuracy(run: EvalRun, results: list[DatasetAccuracy]) -> None:
    EvalSample.objects.filter(run=run).delete()
    EvalSample.objects.bulk_create(sample_rows(run, results))
    new = {(r.model, r.dataset): accuracy_entry(r) for r in results}
    _save(run, merge_entries(run.results or [], "accuracy", new))


def store_performance(run: EvalRun, results: list[DatasetPerformance]) -> None:
    new = {(r.model, r.dataset): performance_entry(r) for r in results}
    _save(run, merge_entries(run.results or [], "performance", new),
          perf_requests=request_rows(results[0]) if results else [])


def store_pass_results(run: EvalRun, pass_name: str, run_dir: Path) -> None:
    if pass_name == "accuracy":
        store_accuracy(run, parse_accuracy(run_dir))
    else:
        store_performance(run, parse_performance(run_dir))
