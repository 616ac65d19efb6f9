"""The run page's result tables, read from run.results (apps/evals/results.py): accuracy per (model, dataset), and
performance per (model, dataset) and stage with whatever percentile columns the file had."""

from __future__ import annotations

from .charts import PERCENTILE_ORDER, SUMMARY_FIELDS, number
from .results import SUMMARY_KEYS, entries_of
from .selectors import percentile_rank

STAT_LABELS = {"n": "N"}
FIXED_ORDER = {"avg": (0, 0.0), "min": (1, 0.0), "median": (2, 0.0), "max": (4, 0.0), "n": (5, 0.0)}


def stat_order(stat: str) -> tuple[int, float]:
    """avg, min, median, the percentiles ascending, max, n; anything else after them."""
    rank = percentile_rank(stat)
    return FIXED_ORDER.get(stat) or ((3, rank) if rank is not None else (6, 0.0))


def stat_columns(tables: list[dict]) -> list[str]:
    """The stat keys present in any of these {metric: {stat: value}} tables, in display order."""
    stats = {s for table in tables for row in table.values() if isinstance(row, dict) for s in row if s != "unit"}
    return sorted(stats, key=lambda s: (stat_order(s), s))


def accuracy_rows(run) -> list[dict]:
    rows = []
    for entry in entries_of(run):
        acc = entry.get("accuracy")
        if not isinstance(acc, dict):
            continue
        counts = acc.get("counts") or {}
        metrics = [{"name": name, "value": number(value),
                    "count": "{}/{}".format(*counts[name]) if len(counts.get(name) or []) == 2 else ""}
                   for name, value in (acc.get("scores") or {}).items()]
        rows.append({"model": entry.get("model", ""), "dataset": entry.get("dataset", ""),
                     "score": number(acc.get("score")), "metrics": metrics, "correct": number(acc.get("correct")),
                     "total": number(acc.get("total")), "failed": number(acc.get("failed"))})
    return rows


def _percentile_table(table: dict) -> tuple[list[str], list[dict]]:
    columns = stat_columns([table])
    names = [m for m in PERCENTILE_ORDER if m in table] + sorted(m for m in table if m not in PERCENTILE_ORDER)
    rows = [{"metric": m, "unit": (table[m] or {}).get("unit", ""),
             "cells": [number((table[m] or {}).get(c)) for c in columns]} for m in names]
    return [STAT_LABELS.get(c, c) for c in columns], rows


def _stage(perf: dict, stage: str) -> dict:
    summary = (perf.get("summary") or {}).get(stage) or {}
    metrics = (perf.get("metrics") or {}).get(stage) or {}
    columns, rows = _percentile_table((perf.get("percentiles") or {}).get(stage) or {})
    return {"name": stage, "headline": stage == perf.get("headline_stage"),
            "summary": [(label, number(summary[key]), unit) for key, label, unit in SUMMARY_FIELDS if key in summary],
            "other_metrics": [(name, number((m or {}).get("value")), (m or {}).get("unit") or "")
                              for name, m in metrics.items() if name not in SUMMARY_KEYS],
            "columns": columns, "rows": rows}


def performance_sections(run) -> list[dict]:
    """One section per (model, dataset) with performance figures; its stages, headline first."""
    sections = []
    for entry in entries_of(run):
        perf = entry.get("performance")
        if not isinstance(perf, dict):
            continue
        stages = [s for s in perf.get("stages") or [] if isinstance(s, str)]
        headline = perf.get("headline_stage")
        ordered = ([headline] if headline in stages else []) + [s for s in stages if s != headline]
        sections.append({"model": entry.get("model", ""), "dataset": entry.get("dataset", ""),
                         "stages": [_stage(perf, s) for s in ordered]})
    return sections
