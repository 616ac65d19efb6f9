"""The numbers the eval pages show, and the data their plotly charts are drawn from (embedded with json_script;
static/js/eval-charts.js builds the figures)."""

from __future__ import annotations

import math

from .selectors import Comparison

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
PERCENTILE_COLUMNS = ("avg", "min", "median", "p75", "p90", "p99", "max", "n")
TIMELINE_LIMIT = 2000  # bars drawn on the per-request timeline; the histograms use every request


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value):
    """JSON for the charts: NaN and infinities would make the page's JSON.parse fail."""
    return value if _is_number(value) else None


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


def summary_rows(run) -> list[tuple[str, str, str]]:
    summary = run.perf_summary or {}
    return [(label, number(summary[key]), unit) for key, label, unit in SUMMARY_FIELDS if key in summary]


def percentile_rows(run) -> list[dict]:
    table = run.perf_percentiles or {}
    names = [m for m in PERCENTILE_ORDER if m in table] + sorted(m for m in table if m not in PERCENTILE_ORDER)
    return [{"metric": m, "unit": (table[m] or {}).get("unit", ""),
             "cells": [number((table[m] or {}).get(c)) for c in PERCENTILE_COLUMNS]} for m in names]


def accuracy_rows(run) -> list[dict]:
    return [{"abbr": abbr, "accuracy": number((d or {}).get("accuracy")), "correct": number((d or {}).get("correct")),
             "total": number((d or {}).get("total")), "failed": number((d or {}).get("failed"))}
            for abbr, d in sorted((run.accuracy_detail or {}).items())]


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
    return f"#{run.pk} {run.deployment_name} r{run.revision_number} c{run.concurrency}"


def compare_table(comparison: Comparison) -> list[dict]:
    rows = []
    for row in comparison.rows:
        cells = []
        for i, value in enumerate(row.values):
            delta = row.deltas[i] if i else None
            cells.append({"value": number(value), "delta": f"{delta:+.1f}%" if _is_number(delta) else "",
                          "regression": bool(i and row.regressions[i])})
        rows.append({"label": row.label, "unit": row.unit, "better": row.better, "cells": cells})
    return rows


def compare_chart_data(comparison: Comparison) -> dict:
    percentiles = [row for row in comparison.rows if "." in row.key]
    return {"runs": [run_label(r) for r in comparison.runs],
            "labels": [row.label for row in percentiles],
            "values": [[_finite(row.values[i]) for row in percentiles] for i in range(len(comparison.runs))],
            "accuracy": [_finite(r.accuracy) for r in comparison.runs]}


def _p90(run, metric: str):
    return _finite(((run.perf_percentiles or {}).get(metric) or {}).get("p90"))


def sweep_chart_data(runs) -> dict:
    """One point per concurrency: output token throughput against TTFT p90 and TPOT p90."""
    points = []
    for run in sorted(runs, key=lambda r: r.concurrency):
        throughput = (run.perf_summary or {}).get("output_token_throughput")
        if _is_number(throughput):
            points.append({"run": run.pk, "concurrency": run.concurrency, "throughput": throughput,
                           "ttft_p90": _p90(run, "TTFT"), "tpot_p90": _p90(run, "TPOT")})
    return {"points": points}
