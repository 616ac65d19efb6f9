"""The numbers the eval pages show, and the data their plotly charts are drawn from (embedded with json_script;
static/js/eval-charts.js builds the figures)."""

from __future__ import annotations

from .choices import EvalStatus
from .results import entries_of, headline_stage
from .selectors import CompareColumn, CompareTable, Comparison, finite_number, latency_table, percentile_rank

SUMMARY_FIELDS = (
    ("requests_total", "Requests", ""),
    ("requests_succeeded", "Succeeded", ""),
    ("requests_failed", "Failed", ""),
    ("duration_ms", "Duration", "ms"),
    ("request_throughput", "Request throughput", "req/s"),
    ("input_tokens_total", "Input tokens", ""),
    ("output_tokens_total", "Output tokens", ""),
    ("input_token_throughput", "Input token throughput", "token/s"),
    ("output_token_throughput", "Output token throughput", "token/s"),
    ("total_token_throughput", "Total token throughput", "token/s"),
    ("concurrency_avg", "Concurrency (mean)", ""),
    ("concurrency_max", "Concurrency (max)", ""),
)
PERCENTILE_ORDER = ("TTFT", "TPOT", "ITL", "E2EL", "InputTokens", "OutputTokens", "OutputTokenThroughput")
SWEEP_PERCENTILE = 90.0  # the sweep draws p90, else the stored percentile nearest to it
TIMELINE_LIMIT = 2000  # bars drawn on the per-request timeline; the histograms use every request


def _is_number(value) -> bool:
    return finite_number(value) is not None


# JSON for the charts: NaN and infinities would make the page's JSON.parse fail
_finite = finite_number


def number(value) -> str:
    if not _is_number(value):
        return "—" if value is None else str(value)
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:,.2f}"


def duration_text(seconds) -> str:
    if not _is_number(seconds):
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def run_chart_data(run) -> dict:
    """Latency histograms (every request) and the per-request timeline (start to end, first token marked)."""
    requests = [r for r in run.perf_requests or [] if isinstance(r, dict)]
    ttft = [r["ttft_ms"] for r in requests if _is_number(r.get("ttft_ms"))]
    e2el = [r["e2el_ms"] for r in requests if _is_number(r.get("e2el_ms"))]
    timeline = [{"i": r.get("i"), "start": r["start_ms"], "e2el": r["e2el_ms"],
                 "ttft": r["ttft_ms"] if _is_number(r.get("ttft_ms")) else None, "ok": bool(r.get("success"))}
                for r in requests if _is_number(r.get("start_ms")) and _is_number(r.get("e2el_ms"))]
    return {"ttft": ttft, "e2el": e2el, "timeline": timeline[:TIMELINE_LIMIT],
            "timeline_dropped": max(0, len(timeline) - TIMELINE_LIMIT)}


def run_label(run) -> str:
    revision = f" r{run.revision_number}" if run.revision_number else ""
    return f"#{run.pk} {run.deployment_name}{revision} c{run.concurrency}"


def column_label(column: CompareColumn) -> str:
    return f"{run_label(column.run)} · {column.model}"


def _column(column: CompareColumn, runs: list) -> dict:
    """A compare column's head: its run, its model, and the ?runs= order that makes its run the baseline."""
    others = [str(r.pk) for r in runs if r.pk != column.run.pk]
    return {"run": column.run, "model": column.model, "baseline_runs": ",".join([str(column.run.pk), *others]),
            "first_run": column.run.pk == runs[0].pk}


def compare_table(table: CompareTable) -> list[dict]:
    rows = []
    for row in table.rows:
        cells = []
        for i, value in enumerate(row.values):
            delta = row.deltas[i] if i else None
            cells.append({"value": number(value), "delta": f"{delta:+.1f}%" if _is_number(delta) else "",
                          "regression": bool(i and row.regressions[i])})
        rows.append({"label": row.label, "unit": row.unit, "better": row.better, "cells": cells})
    return rows


def _series(rows: list, count: int) -> dict:
    """Row labels, and per column its values in that order (the traces of a grouped bar chart)."""
    return {"labels": [row.label for row in rows],
            "values": [[_finite(row.values[i]) for row in rows] for i in range(count)]}


def compare_chart_data(table: CompareTable) -> dict:
    """A trace per (run, model): the latency percentiles, and the accuracy metrics."""
    count = len(table.columns)
    return {"dataset": table.dataset, "columns": [column_label(c) for c in table.columns],
            "percentiles": _series([row for row in table.rows if row.part == "latency"], count),
            "accuracy": _series([row for row in table.rows if row.part == "accuracy"], count)}


def compare_tables(comparison: Comparison) -> list[dict]:
    """What the compare page draws per dataset: the column heads, the rows, the chart data (and its element id)."""
    return [{"dataset": table.dataset, "columns": [_column(c, comparison.runs) for c in table.columns],
             "rows": compare_table(table), "chart": compare_chart_data(table), "chart_id": f"compare-chart-data-{i}"}
            for i, table in enumerate(comparison.tables, 1)]


def _sweep_rank(stat: str) -> float | None:
    """The percentile a stat is: p95 95, the median 50; None for avg, min, n."""
    return 50.0 if stat == "median" else percentile_rank(stat)


def _sweep_stat(stats: dict) -> str | None:
    """p90 when stored, else the stored percentile nearest to it (the higher of two as near)."""
    ranks = {stat: _sweep_rank(stat) for stat, value in stats.items() if _is_number(value)}
    ranks = {stat: rank for stat, rank in ranks.items() if rank is not None}
    return min(ranks, key=lambda stat: (abs(ranks[stat] - SWEEP_PERCENTILE), -ranks[stat]), default=None)


def _sweep_latency(entry: dict, metric: str) -> tuple[float | None, str]:
    stats = latency_table(entry, metric)
    stat = _sweep_stat(stats)
    return (_finite(stats[stat]), stat) if stat else (None, "")


def _sweep_figures(entry: dict) -> dict:
    summary = headline_stage(entry, "summary")
    (ttft, ttft_stat), (tpot, tpot_stat) = _sweep_latency(entry, "TTFT"), _sweep_latency(entry, "TPOT")
    return {"model": str(entry.get("model") or ""), "dataset": str(entry.get("dataset") or ""),
            "throughput": _finite(summary.get("output_token_throughput")), "ttft": ttft, "ttft_stat": ttft_stat,
            "tpot": tpot, "tpot_stat": tpot_stat, "failed": _finite(summary.get("requests_failed"))}


def _sweep_row(run, figures: list[dict]) -> dict:
    """The page's table row of a run: its state and its figures per (model, dataset), one empty line before any."""
    running = run.status == EvalStatus.RUNNING and run.progress_total
    return {"id": run.pk, "concurrency": run.concurrency, "status_label": run.get_status_display(),
            "colour": run.colour, "progress": f"{run.progress_done}/{run.progress_total}" if running else "",
            "figures": figures or [_sweep_figures({})]}


def _axis_title(metric: str, stats: set[str]) -> str:
    if stats <= {"p90"}:
        return f"{metric} p90 (ms)"
    used = "/".join(sorted(stats, key=_sweep_rank))
    return f"{metric} {used} (ms; the stored percentile nearest p90)"


def sweep_chart_data(runs) -> dict:
    """A line per model (per model and dataset when the runs hold several): output token throughput against TTFT and
    TPOT at p90, else the stored percentile nearest to it; one point per concurrency. rows: the page's table."""
    rows, lines = [], {}
    for run in sorted(runs, key=lambda r: r.concurrency):
        figures = [_sweep_figures(e) for e in entries_of(run) if e.get("performance")]
        rows.append(_sweep_row(run, figures))
        for f in figures:
            if f["throughput"] is not None:
                lines.setdefault((f["model"], f["dataset"]), []).append({"run": run.pk, "concurrency": run.concurrency,
                                                                         **f})
    several_datasets = len({dataset for _, dataset in lines}) > 1
    points = [p for line in lines.values() for p in line]
    return {"lines": [{"name": f"{model} · {dataset}" if several_datasets else model, "points": line}
                      for (model, dataset), line in lines.items()],
            "ttft_title": _axis_title("TTFT", {p["ttft_stat"] for p in points if p["ttft_stat"]}),
            "tpot_title": _axis_title("TPOT", {p["tpot_stat"] for p in points if p["tpot_stat"]}),
            "rows": rows}
