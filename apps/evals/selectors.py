"""Eval reads for pages and the API: run lists, samples, and the side-by-side comparison of runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.deployments.topology import SpecError, spec_diff, spec_from_dict

from .choices import EvalMode
from .models import EvalRun, EvalSample

# (key in the stored results, label, unit, which direction is better)
ACCURACY_ROWS = (("accuracy", "Accuracy", "%", "higher"),)
SUMMARY_ROWS = (
    ("request_throughput", "Request throughput", "req/s", "higher"),
    ("output_token_throughput", "Output token throughput", "token/s", "higher"),
    ("total_token_throughput", "Total token throughput", "token/s", "higher"),
    ("requests_failed", "Failed requests", "", "lower"),
)
PERCENTILE_METRICS = ("TTFT", "TPOT", "ITL", "E2EL")
PERCENTILE_STATS = ("avg", "median", "p90", "p99")
REGRESSION_THRESHOLD = 0.05  # a change worse than 5% (or any accuracy drop) is highlighted


def runs_list(*, deployment_id: int | None = None):
    qs = EvalRun.objects.select_related("created_by", "job", "sweep").defer("perf_requests", "revision_spec")
    if deployment_id is not None:
        qs = qs.filter(deployment_id=deployment_id)
    return qs


def samples_of(run: EvalRun, *, wrong_only: bool = False):
    qs = EvalSample.objects.filter(run=run)
    return qs.filter(correct=False) if wrong_only else qs


@dataclass
class CompareRow:
    key: str
    label: str
    unit: str
    better: str
    values: list[float | None]
    deltas: list[float | None] = field(default_factory=list)  # relative to the first run, in percent
    regressions: list[bool] = field(default_factory=list)


@dataclass
class Comparison:
    runs: list[EvalRun]
    rows: list[CompareRow]
    topology_changes: list[list[tuple[str, object, object]]]  # per run (after the first): spec paths that differ
    notes: list[str]


def _value(run: EvalRun, key: str) -> float | None:
    if key == "accuracy":
        return run.accuracy
    if "." in key:
        metric, stat = key.split(".", 1)
        return ((run.perf_percentiles or {}).get(metric) or {}).get(stat)
    return (run.perf_summary or {}).get(key)


def _row(runs: list[EvalRun], key: str, label: str, unit: str, better: str) -> CompareRow | None:
    values = [_value(r, key) for r in runs]
    if all(v is None for v in values):
        return None
    row = CompareRow(key, label, unit, better, values)
    base = values[0]
    for v in values:
        if base is None or v is None:
            row.deltas.append(None)
            row.regressions.append(False)
            continue
        delta = (v - base) / abs(base) * 100 if base else (0.0 if v == base else None)
        row.deltas.append(delta)
        if key == "accuracy":
            worse = v < base
        elif delta is None:
            worse = v > base if better == "lower" else v < base
        else:
            worse = delta > REGRESSION_THRESHOLD * 100 if better == "lower" else delta < -REGRESSION_THRESHOLD * 100
        row.regressions.append(worse)
    return row


def _spec_changes(base: EvalRun, other: EvalRun) -> list[tuple[str, object, object]]:
    try:
        return spec_diff(spec_from_dict(base.revision_spec), spec_from_dict(other.revision_spec))
    except (SpecError, KeyError, TypeError, ValueError):
        return [("spec", "unreadable", "unreadable")]


def compare_runs(runs: list[EvalRun]) -> Comparison:
    """Side by side, the first run is the baseline: metric deltas, regressions, and what changed in the topology."""
    rows = []
    for key, label, unit, better in ACCURACY_ROWS + SUMMARY_ROWS:
        row = _row(runs, key, label, unit, better)
        if row:
            rows.append(row)
    for metric in PERCENTILE_METRICS:
        for stat in PERCENTILE_STATS:
            row = _row(runs, f"{metric}.{stat}", f"{metric} {stat}", "ms", "lower")
            if row:
                rows.append(row)
    notes = []
    if len({r.dataset_key for r in runs}) > 1:
        notes.append("the runs used different datasets: accuracy is not comparable")
    if len({(r.concurrency, r.request_rate, r.max_out_len) for r in runs}) > 1:
        notes.append("the runs used different load settings (concurrency, request rate or output length)")
    if len({r.ignore_eos for r in runs if r.mode != EvalMode.ACCURACY}) > 1:
        notes.append("some runs had a fixed output length (ignore EOS) and some stopped where the model ended: "
                     "their throughput and latency are not comparable")
    changes = [_spec_changes(runs[0], r) for r in runs[1:]]
    return Comparison(runs=runs, rows=rows, topology_changes=changes, notes=notes)
