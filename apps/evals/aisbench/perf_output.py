"""A performance run's outputs, in performances/<model>/: <ds>.json (common metrics, values as "12.3 ms" strings)
and <ds>.csv (per-request distributions; its statistic columns are the calculator's stats_list), both per stage
("total" from DefaultPerfMetricCalculator, "stable" from StablePerfMetricCalculator); <ds>_details.jsonl (one line
per request: success, error_info, input_tokens, output_tokens, and time_points as {"__db_ref__": n}) and
db_data/<db_name> (SQLite table numpy_store: row n = the request's time.perf_counter() points as a .npy float64
array: send, then each chunk)."""

from __future__ import annotations

import ast
import re
import sqlite3
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from apps.evals.aisbench.accuracy_output import FailedSample, parse_failed
from apps.evals.aisbench.cells import read_cell, read_count
from apps.evals.aisbench.output_files import (
    OutputError,
    Records,
    need,
    read_csv,
    read_json,
    read_jsonl,
)

DISTRIBUTION_COLUMNS = ("Performance Parameters", "Stage")
COMMON_METRIC_COLUMNS = ("Common Metric", "Stage", "Value")  # <ds>.json as a table (default_perf.py)
STAT_KEYS = {"Average": "avg", "Min": "min", "Max": "max", "Median": "median"}  # and P<k> -> p<k>
PERCENTILE = re.compile(r"P(\d+(?:\.\d+)?)")
HEADLINE_STAGES = ("total", "stable")  # DefaultPerfMetricCalculator's, then StablePerfMetricCalculator's


@dataclass
class Quantity:
    value: float | None  # None: written as "-", "", "nan" or "inf"
    unit: str | None  # times are in "ms"; throughputs keep theirs ("token/s", "req/s"); counts have None


@dataclass
class Distribution:
    metric: str  # TTFT, TPOT, ITL, E2EL, InputTokens, OutputTokens, OutputTokenThroughput
    stage: str
    unit: str | None
    stats: dict[str, float | None]  # the file's statistic columns, in its order: avg, min, max, median, p75, ...
    n: int | None


@dataclass
class RequestRow:
    id: int
    success: bool
    error: str
    input_tokens: int
    output_tokens: int
    start_ms: float | None = None  # since the first request of the dataset was sent
    latency_ms: float | None = None  # send -> last chunk (E2EL)
    ttft_ms: float | None = None  # send -> first chunk


@dataclass
class DatasetPerformance:
    model: str
    dataset: str
    metrics_by_stage: dict[str, dict[str, Quantity]] = field(default_factory=dict)  # <ds>.json: {stage: {metric: q}}
    distributions: list[Distribution] = field(default_factory=list)  # <ds>.csv
    requests: list[RequestRow] = field(default_factory=list)
    failed: list[FailedSample] = field(default_factory=list)

    @property
    def stages(self) -> list[str]:
        return list(dict.fromkeys([*self.metrics_by_stage, *(d.stage for d in self.distributions)]))

    @property
    def headline_stage(self) -> str | None:
        stages = self.stages
        return next((s for s in HEADLINE_STAGES if s in stages), stages[0] if stages else None)

    @property
    def metrics(self) -> dict[str, Quantity]:
        return self.metrics_by_stage.get(self.headline_stage or "", {})

    def distribution(self, metric: str, stage: str | None = None) -> Distribution | None:
        stage = stage or self.headline_stage
        return next((d for d in self.distributions if d.metric == metric and d.stage == stage), None)


def parse_metrics(path: Path) -> dict[str, dict[str, Quantity]]:
    """{stage: {metric: Quantity}} from <ds>.json."""
    return metrics_from_json(read_json(path), path)


def metrics_from_json(data: object, path: str | Path) -> dict[str, dict[str, Quantity]]:
    if not isinstance(data, dict):
        raise OutputError(path, "", "is not a JSON object")
    for metric, stages in data.items():
        if not isinstance(stages, dict):
            raise OutputError(path, metric, "is not an object of stages")
    return metrics_by_stage(((metric, stage, value, f"{metric}.{stage}")
                             for metric, stages in data.items() for stage, value in stages.items()), path)


def metrics_from_records(records: Records, path: str | Path) -> dict[str, dict[str, Quantity]]:
    """The console's table of <ds>.json (COMMON_METRIC_COLUMNS)."""
    return metrics_by_stage(((row["Common Metric"], row["Stage"], row["Value"], f"line {number}, column Value")
                             for number, row in records), path)


def metrics_by_stage(cells: Iterable[tuple[str, str, object, str]], path: str | Path) -> dict[str, dict[str, Quantity]]:
    """{stage: {metric: Quantity}} from (metric, stage, written value, where) tuples."""
    by_stage: dict[str, dict[str, Quantity]] = {}
    for metric, stage, value, where in cells:
        cell = read_cell(value, path, where)
        by_stage.setdefault(stage, {})[metric] = Quantity(cell.value, cell.unit)
    return by_stage


def parse_distributions(path: Path) -> list[Distribution]:
    """<ds>.csv: one row per (metric, stage); its statistic columns are those the calculator's stats_list named."""
    return distributions_from_records(read_csv(path, DISTRIBUTION_COLUMNS), path)


def stat_key(column: str) -> str:
    found = PERCENTILE.fullmatch(column)
    return f"p{float(found.group(1)):g}" if found else STAT_KEYS.get(column, column.lower())


def distributions_from_records(records: Records, path: str | Path) -> list[Distribution]:
    out = []
    for number, row in records:
        stat_columns = [c for c in row if c not in (*DISTRIBUTION_COLUMNS, "N")]
        if not stat_columns:
            raise OutputError(path, f"line {number}", "has no statistic column (Average, Min, Max, Median, P<k>)")
        stats, units = {}, set()
        for column in stat_columns:
            cell = read_cell(row[column], path, f"line {number}, column {column}")
            stats[stat_key(column)] = cell.value
            if cell.value is not None or cell.unit is not None:
                units.add(cell.unit)
        if len(units) > 1:
            raise OutputError(path, f"line {number}", f"mixes units {sorted(map(str, units))}")
        n = read_count(row["N"], path, f"line {number}, column N") if "N" in row else None
        out.append(Distribution(row["Performance Parameters"], row["Stage"], units.pop() if units else None, stats, n))
    return out


def npy_float64(blob: bytes, where: str, db: Path) -> list[float]:
    """A 1-D little-endian float64 .npy blob, read without numpy."""
    if blob[:6] != b"\x93NUMPY" or len(blob) < (10 if blob[6:7] == b"\x01" else 12):
        raise OutputError(db, where, "is not a .npy array")
    header_len, start = (struct.unpack_from("<H", blob, 8)[0], 10) if blob[6] == 1 else (
        struct.unpack_from("<I", blob, 8)[0], 12)
    try:
        header = ast.literal_eval(blob[start:start + header_len].decode("latin-1"))
        (count,) = header["shape"]
        ok = header["descr"] == "<f8" and not header["fortran_order"] and type(count) is int and count >= 0
    except (ValueError, SyntaxError, KeyError, TypeError):
        raise OutputError(db, where, "has an unreadable .npy header") from None
    data = blob[start + header_len:]
    if not ok or len(data) != 8 * count:
        raise OutputError(db, where, f"is not {count} float64 values")
    return list(struct.unpack(f"<{count}d", data))


def load_time_points(db: Path) -> dict[int, list[float]]:
    if not db.is_file():
        return {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT id, arr_blob FROM numpy_store").fetchall()
    except sqlite3.Error as e:
        raise OutputError(db, "numpy_store", f"cannot be read ({e})") from None
    out = {}
    for row_id, blob in rows:
        if not isinstance(blob, bytes):
            raise OutputError(db, f"numpy_store row {row_id}", f"holds {type(blob).__name__}, not a .npy array")
        out[row_id] = npy_float64(blob, f"numpy_store row {row_id}", db)
    return out


def parse_requests(details: Path) -> list[RequestRow]:
    timed: list[tuple[RequestRow, list[float]]] = []
    rows, databases = [], {}
    for number, line in read_jsonl(details):
        where = f"line {number}"
        row = RequestRow(int(need(line, "id", int, details, where)), bool(need(line, "success", bool, details, where)),
                         str(line.get("error_info") or ""), int(need(line, "input_tokens", int, details, where)),
                         int(need(line, "output_tokens", int, details, where)))
        rows.append(row)
        ref, db_name = line.get("time_points"), line.get("db_name")
        if isinstance(ref, dict) and isinstance(ref.get("__db_ref__"), int) and isinstance(db_name, str) and (
                "/" not in db_name):
            if db_name not in databases:
                databases[db_name] = load_time_points(details.parent / "db_data" / db_name)
            points = databases[db_name].get(ref["__db_ref__"], [])
            if len(points) >= 2:
                timed.append((row, points))
    first = min((points[0] for _, points in timed), default=0.0)
    for row, points in timed:
        row.start_ms = (points[0] - first) * 1000
        row.latency_ms = (points[-1] - points[0]) * 1000
        row.ttft_ms = (points[1] - points[0]) * 1000
    return sorted(rows, key=lambda r: r.id)


def parse_performance(run_dir: str | Path) -> list[DatasetPerformance]:
    """Metrics, distributions and per-request rows of every (model, dataset) of a perf run folder: each dataset that
    has any of <ds>.json, <ds>.csv and <ds>_details.jsonl."""
    out = []
    for folder in sorted(p for p in Path(run_dir).glob("performances/*") if p.is_dir()):
        for dataset in performance_datasets(folder):
            perf = DatasetPerformance(folder.name, dataset, failed=parse_failed(folder / f"{dataset}_failed.jsonl"))
            if (folder / f"{dataset}_details.jsonl").is_file():
                perf.requests = parse_requests(folder / f"{dataset}_details.jsonl")
            if (folder / f"{dataset}.json").is_file():
                perf.metrics_by_stage = parse_metrics(folder / f"{dataset}.json")
            if (folder / f"{dataset}.csv").is_file():
                perf.distributions = parse_distributions(folder / f"{dataset}.csv")
            out.append(perf)
    return out


def performance_datasets(folder: Path) -> list[str]:
    files = [p for p in folder.iterdir() if p.is_file()]
    names = {p.name.removesuffix("_details.jsonl") for p in files if p.name.endswith("_details.jsonl")}
    return sorted(names | {p.stem for p in files if p.suffix in (".json", ".csv")})
