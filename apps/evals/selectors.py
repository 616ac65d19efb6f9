"""Eval reads for pages and the API: run lists, samples, and the side-by-side comparison of runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from apps.deployments.topology import SpecError, spec_diff, spec_from_dict

from .choices import EvalMode
from .models import EvalRun, EvalSample
from .results import entries_of, headline_stage, mapping

# (key in a results entry's headline-stage summary, label, unit, which direction is better)
SUMMARY_ROWS = (
    ("request_throughput", "Request throughput", "req/s", "higher"),
    ("output_token_throughput", "Output token throughput", "token/s", "higher"),
    ("total_token_throughput", "Total token throughput", "token/s", "higher"),
    ("requests_failed", "Failed requests", "", "lower"),
)
PERCENTILE_METRICS = ("TTFT", "TPOT", "ITL", "E2EL")
PERCENTILE_STATS = ("avg", "median", "p50", "p75", "p90", "p95", "p99")  # the stats a sweep point names in the API
PERCENTILE_KEY = re.compile(r"^p(\d+(?:\.\d+)?)$")  # p50, p95, p99.9: whatever columns the file had
SCORE_PREFIX = "score:"  # the key of an accuracy metric's row other than the score: score:pass@4
REGRESSION_THRESHOLD = 0.05  # a change worse than 5% (or any accuracy drop) is highlighted
NO_SPEC = "no topology recorded (external)"


def runs_list(*, deployment_id: int | None = None):
    qs = EvalRun.objects.select_related("created_by", "job", "sweep").defer("perf_requests", "revision_spec")
    if deployment_id is not None:
        qs = qs.filter(deployment_id=deployment_id)
    return qs


def samples_of(run: EvalRun, *, wrong_only: bool = False):
    qs = EvalSample.objects.filter(run=run)
    return qs.filter(correct=False) if wrong_only else qs


def finite_number(value) -> float | None:
    """A stored figure, or None for anything that is not a finite number (a failed task's "-", NaN)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None


def latency_table(entry: dict, metric: str) -> dict:
    """{stat: value} of one latency metric (TTFT...) at the entry's headline stage; {} without one."""
    return mapping(headline_stage(entry, "percentiles").get(metric))


def _scores(entry: dict) -> dict:
    return mapping(mapping(entry.get("accuracy")).get("scores"))


def percentile_rank(stat: str) -> float | None:
    """p95 -> 95.0; None for a stat that is not a percentile column (avg, median, min, n)."""
    found = PERCENTILE_KEY.match(stat)
    return float(found.group(1)) if found else None


def latency_stats(tables: list[dict]) -> list[str]:
    """The stats to compare that any of these {stat: value} tables has: avg, median, then the percentiles ascending."""
    present = {stat for table in tables for stat in table}
    percentiles = sorted((s for s in present if percentile_rank(s) is not None), key=percentile_rank)
    return [s for s in ("avg", "median") if s in present] + percentiles


@dataclass
class CompareRow:
    key: str
    label: str
    unit: str
    better: str
    values: list[float | None]
    deltas: list[float | None] = field(default_factory=list)  # relative to the table's first column, in percent
    regressions: list[bool] = field(default_factory=list)

    @property
    def part(self) -> str:
        """accuracy, summary or latency: the part of the table (and the chart) the row belongs to."""
        if self.key == "accuracy" or self.key.startswith(SCORE_PREFIX):
            return "accuracy"
        return "latency" if "." in self.key else "summary"


@dataclass
class CompareColumn:
    run: EvalRun
    entry: dict  # one (model, dataset) of run.results: apps/evals/results.py

    @property
    def model(self) -> str:
        return str(self.entry.get("model") or "")


@dataclass
class CompareTable:
    dataset: str
    columns: list[CompareColumn]  # every (run, model) that has the dataset; the first is the baseline
    rows: list[CompareRow]


@dataclass
class TopologyChange:
    run: EvalRun
    changes: list[tuple[str, object, object]]  # spec paths that differ from the baseline's
    problem: str = ""  # why the specs could not be compared


@dataclass
class Comparison:
    runs: list[EvalRun]
    tables: list[CompareTable]  # one per dataset, in the order the runs first name them
    topology_changes: list[TopologyChange]  # per run after the first
    notes: list[str]

    @property
    def rows(self) -> list[CompareRow]:
        """The first table's rows: what the comparison was when a run held one dataset."""
        return self.tables[0].rows if self.tables else []


def _delta(base: float | None, value: float | None) -> float | None:
    if base is None or value is None:
        return None
    if base:
        return (value - base) / abs(base) * 100
    return 0.0 if value == base else None


def _worse(base: float | None, value: float | None, delta: float | None, better: str, any_drop: bool) -> bool:
    if base is None or value is None:
        return False
    if any_drop or delta is None:
        return value > base if better == "lower" else value < base
    limit = REGRESSION_THRESHOLD * 100
    return delta > limit if better == "lower" else delta < -limit


def _row(key: str, label: str, unit: str, better: str, values: list, *, any_drop: bool = False) -> CompareRow | None:
    """None when no column has the figure; any_drop: every change for the worse is a regression (accuracy)."""
    values = [finite_number(v) for v in values]
    if all(v is None for v in values):
        return None
    row = CompareRow(key, label, unit, better, values)
    for value in values:
        delta = _delta(values[0], value)
        row.deltas.append(delta)
        row.regressions.append(_worse(values[0], value, delta, better, any_drop))
    return row


def _score_metric(scores: dict) -> str | None:
    """Which metric an entry's score is (apps/evals/aisbench/accuracy_output.py DatasetAccuracy.score)."""
    return "accuracy" if "accuracy" in scores else next(iter(scores), None)


def _accuracy_rows(entries: list[dict]) -> list[CompareRow | None]:
    """The score, then every other accuracy metric a column has (pass@k...)."""
    others = []
    for scores in map(_scores, entries):
        others += [m for m in scores if m != _score_metric(scores) and m not in others]
    score = _row("accuracy", "Accuracy", "%", "higher",
                 [mapping(e.get("accuracy")).get("score") for e in entries], any_drop=True)
    return [score] + [_row(f"{SCORE_PREFIX}{m}", m, "", "higher", [_scores(e).get(m) for e in entries], any_drop=True)
                      for m in others]


def _summary_rows(entries: list[dict]) -> list[CompareRow | None]:
    summaries = [headline_stage(e, "summary") for e in entries]
    return [_row(key, label, unit, better, [s.get(key) for s in summaries])
            for key, label, unit, better in SUMMARY_ROWS]


def _percentile_rows(entries: list[dict]) -> list[CompareRow | None]:
    rows = []
    for metric in PERCENTILE_METRICS:
        tables = [latency_table(e, metric) for e in entries]
        rows += [_row(f"{metric}.{stat}", f"{metric} {stat}", "ms", "lower", [t.get(stat) for t in tables])
                 for stat in latency_stats(tables)]
    return rows


def _table(dataset: str, columns: list[CompareColumn]) -> CompareTable:
    entries = [c.entry for c in columns]
    rows = _accuracy_rows(entries) + _summary_rows(entries) + _percentile_rows(entries)
    return CompareTable(dataset, columns, [row for row in rows if row])


def _tables(runs: list[EvalRun]) -> list[CompareTable]:
    by_dataset: dict[str, list[CompareColumn]] = {}
    for run in runs:
        for entry in entries_of(run):
            by_dataset.setdefault(str(entry.get("dataset") or ""), []).append(CompareColumn(run, entry))
    return [_table(dataset, columns) for dataset, columns in by_dataset.items()]


def _topology_change(base: EvalRun, other: EvalRun) -> TopologyChange:
    if not other.revision_spec:
        return TopologyChange(other, [], NO_SPEC)
    if not base.revision_spec:
        return TopologyChange(other, [], f"the baseline #{base.pk} has {NO_SPEC}")
    try:
        return TopologyChange(other, spec_diff(spec_from_dict(base.revision_spec), spec_from_dict(other.revision_spec)))
    except (SpecError, KeyError, TypeError, ValueError):
        return TopologyChange(other, [], "unreadable spec")


def _notes(runs: list[EvalRun]) -> list[str]:
    notes = [f"#{run.pk} has no results to compare ({run.get_status_display().lower()})"
             for run in runs if not entries_of(run)]
    if len({(r.concurrency, r.request_rate, r.max_out_len) for r in runs}) > 1:
        notes.append("the runs used different load settings (concurrency, request rate or output length)")
    if len({r.ignore_eos for r in runs if r.mode != EvalMode.ACCURACY}) > 1:
        notes.append("some runs had a fixed output length (ignore EOS) and some stopped where the model ended: "
                     "their throughput and latency are not comparable")
    return notes


def compare_runs(runs: list[EvalRun]) -> Comparison:
    """Side by side, a table per dataset with a column per (run, model) that has it; each table's first column is its
    baseline (metric deltas, regressions); the first run is the baseline of the topology changes."""
    changes = [_topology_change(runs[0], run) for run in runs[1:]]
    return Comparison(runs=runs, tables=_tables(runs), topology_changes=changes, notes=_notes(runs))
