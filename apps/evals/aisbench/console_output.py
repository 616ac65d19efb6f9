"""Results in AISBench's console output (docs/aisbench-facts.md, "Console tables"), with the log lines, progress bars
and ANSI codes around them ignored:
  accuracy     DefaultSummarizer.summarize prints the summary as a tabulate "simple" table, then as markdown after
               "The markdown format results is as below:" (the same figures twice; HarborSummarizer: a "grid" table);
  performance  DefaultPerfSummarizer._output_to_screen logs "Performance Results of task [<model>/<dataset>]:" and
               prints <ds>.csv (Performance Parameters, Stage, <stats>, N) then <ds>.json (Common Metric, Stage,
               Value) as tabulate "fancy_grid" tables. The log line goes to stderr and the tables to stdout, so a
               capture of each stream in turn has all the tables first: then the task lines name them in order."""

from __future__ import annotations

import re
from dataclasses import dataclass

from apps.evals.aisbench.accuracy_output import DatasetAccuracy, accuracy_from_records
from apps.evals.aisbench.perf_output import (
    COMMON_METRIC_COLUMNS,
    DISTRIBUTION_COLUMNS,
    DatasetPerformance,
    distributions_from_records,
    metrics_from_records,
)
from apps.evals.aisbench.summary_formats import SUMMARY_COLUMNS, is_summary_table
from apps.evals.aisbench.text_tables import TextTable, find_tables, text_lines

TASK_LINE = re.compile(r"Performance Results of task \[([^/\]]+)/([^\]]+)\]")
UNKNOWN = "unknown"  # the model (and dataset) of perf tables no task line names


@dataclass
class PerfTables:
    task: tuple[str, str] | None = None
    distributions: TextTable | None = None
    metrics: TextTable | None = None


def read_console(text: str, name: str) -> tuple[list[DatasetAccuracy], list[DatasetPerformance]]:
    lines = text_lines(text)
    tables = find_tables(lines)
    accuracy: dict[tuple[str, str], DatasetAccuracy] = {}
    for table in filter(is_summary_table, tables):
        for result in accuracy_from_records(table.header_line, table.records(name, SUMMARY_COLUMNS), name):
            accuracy[(result.model, result.dataset)] = result  # the markdown repeats the simple table
    return list(accuracy.values()), [performance(group, name) for group in perf_groups(lines, tables)]


def perf_groups(lines: list[str], tables: list[TextTable]) -> list[PerfTables]:
    """The perf tables of each task, named by the task line before them, else by the unused task lines in order."""
    events: list[tuple[int, TextTable | tuple[str, str]]] = [
        (t.header_line, t) for t in tables if _kind(t)] + [
        (number, found.groups()) for number, line in enumerate(lines, 1) if (found := TASK_LINE.search(line))]
    groups: list[PerfTables] = []
    pending: tuple[str, str] | None = None
    unused: list[tuple[str, str]] = []
    for _, item in sorted(events, key=lambda event: event[0]):
        if isinstance(item, tuple):
            unused += [pending] if pending else []
            pending = item
            continue
        kind = _kind(item)
        current = groups[-1] if groups else None
        if (current is None or pending is not None or getattr(current, kind) is not None
                or (kind == "distributions" and current.metrics is not None)):
            current = PerfTables(pending)
            groups.append(current)
            pending = None
        setattr(current, kind, item)
    unused += [pending] if pending else []
    unnamed = [g for g in groups if g.task is None]
    for group, task in zip(unnamed, unused, strict=False):
        group.task = task
    nameless = [g for g in groups if g.task is None]
    for number, group in enumerate(nameless, 1):
        group.task = (UNKNOWN, UNKNOWN if len(nameless) == 1 else f"{UNKNOWN}-{number}")
    return groups


def performance(group: PerfTables, name: str) -> DatasetPerformance:
    model, dataset = group.task or (UNKNOWN, UNKNOWN)
    perf = DatasetPerformance(model, dataset)
    if group.distributions:
        perf.distributions = distributions_from_records(group.distributions.records(name, DISTRIBUTION_COLUMNS), name)
    if group.metrics:
        perf.metrics_by_stage = metrics_from_records(group.metrics.records(name, COMMON_METRIC_COLUMNS), name)
    return perf


def _kind(table: TextTable) -> str | None:
    if tuple(table.header[:2]) == DISTRIBUTION_COLUMNS:
        return "distributions"
    return "metrics" if tuple(table.header) == COMMON_METRIC_COLUMNS else None
