"""An accuracy run's outputs: summary/summary_<ts>.csv (scores, "-" = the task failed; its .md and .txt forms are
read when it is missing: summary_formats.py), results/<model>/<ds>.json
(per-sample details with --dump-eval-details), predictions/<model>/<ds>.jsonl (raw responses of the successful
requests) and <ds>_failed.jsonl (the failed ones, which count as wrong and show in details with an empty answer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from apps.evals.aisbench.cells import read_cell
from apps.evals.aisbench.output_files import (
    OutputError,
    Records,
    need,
    prompt_text,
    read_json,
    read_jsonl,
    read_text,
)
from apps.evals.aisbench.summary_formats import SUMMARY_COLUMNS, summary_records

# total_count: a column of agent benchmarks' summaries (summarizers/default.py, harbor.py), not a model
NOT_MODEL_COLUMNS = (*SUMMARY_COLUMNS, "total_count")
SUMMARY_SUFFIXES = ("csv", "md", "txt")  # the forms of one summary, the most exact first


@dataclass
class FailedSample:
    id: int
    prompt: str
    error: str


@dataclass
class SampleDetail:
    id: int
    prompt: str
    response: str  # the whole model output (reasoning included); "" when the request failed
    extracted: list[str]  # the answer(s) the postprocessor took out, one per sample of the item
    references: list[str]
    correct: list[bool]
    success: bool  # False: the request failed and was scored as wrong

    @property
    def is_correct(self) -> bool:
        return bool(self.correct) and all(self.correct)


@dataclass
class DatasetAccuracy:
    model: str
    dataset: str
    scores: dict[str, float | None]  # metric -> value; None when the summary says "-" (the task failed)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # metric -> (correct, total), when written
    samples: list[SampleDetail] = field(default_factory=list)
    failed: list[FailedSample] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        return self.scores.get("accuracy", next(iter(self.scores.values()), None))


def summary_file(run_dir: Path) -> Path | None:
    """The newest summary of the run folder, in its most exact form."""
    for suffix in SUMMARY_SUFFIXES:
        found = sorted((run_dir / "summary").glob(f"summary_*.{suffix}"))
        if found:
            return found[-1]
    return None


def parse_summary(path: Path) -> list[DatasetAccuracy]:
    """Scores (and counts) of every (model, dataset) of a summary file, in any of its forms; no samples."""
    return accuracy_from_records(*summary_records(read_text(path), path), path)


def accuracy_from_records(header_line: int, records: Records, path: str | Path) -> list[DatasetAccuracy]:
    out: dict[tuple[str, str], DatasetAccuracy] = {}
    for number, row in records:
        models = [c for c in row if c not in NOT_MODEL_COLUMNS]
        if not models:
            raise OutputError(path, f"line {header_line}", "has no model column")
        for name, where in [(m, f"line {header_line}, column {m[:60]}") for m in models] + [
                (row["dataset"], f"line {number}, column dataset")]:
            if not _folder_name(name):  # both name files below the run folder
                raise OutputError(path, where, f"{name[:60]!r} is not a model or dataset name")
        metric = row["metric"] if row["metric"] not in ("-", "") else "accuracy"
        for model in models:
            cell = read_cell(row[model], path, f"line {number}, column {model}")
            result = out.setdefault((model, row["dataset"]), DatasetAccuracy(model, row["dataset"], {}))
            result.scores[metric] = cell.value
            if cell.count is not None:
                result.counts[metric] = cell.count
    return list(out.values())


def _folder_name(name: str) -> bool:
    return 0 < len(name.encode()) <= 200 and name not in (".", "..") and not any(c in name for c in "/\\\0")


def parse_failed(path: Path) -> list[FailedSample]:
    if not path.is_file():
        return []
    return [FailedSample(int(need(row, "id", int, path, f"line {n}")),
                         prompt_text(row.get("input")), str(row.get("error_info") or "unknown error"))
            for n, row in read_jsonl(path)]


def parse_predictions(path: Path) -> dict[int, str]:
    if not path.is_file():
        return {}
    return {int(need(row, "id", int, path, f"line {n}")): str(row.get("prediction", "")) for n, row in read_jsonl(path)}


def parse_details(results_json: Path, responses: dict[int, str], failed_ids: set[int]) -> list[SampleDetail]:
    data = read_json(results_json)
    if not isinstance(data, dict):
        raise OutputError(results_json, "", "is not a JSON object")
    details = data.get("details", {})
    if not isinstance(details, dict):
        raise OutputError(results_json, "details", "is not an object")
    samples = []
    for key, item in details.items():
        where = f"details[{key}]"
        if not (key.isascii() and key.isdigit()) or not isinstance(item, dict):
            raise OutputError(results_json, where, "is not a sample keyed by its id")
        sample_id = int(key)
        extracted = need(item, "predictions", list, results_json, where)
        references = need(item, "references", list, results_json, where)
        correct = need(item, "correct", list, results_json, where)
        if not all(isinstance(c, bool) for c in correct):  # type: ignore[union-attr]
            raise OutputError(results_json, where, "'correct' holds something other than true/false")
        samples.append(SampleDetail(
            sample_id, prompt_text(item.get("prompt")),
            responses.get(sample_id, "" if sample_id in failed_ids else str(item.get("origin_prediction", ""))),
            [str(x) for x in extracted], [str(x) for x in references], list(correct),  # type: ignore[arg-type]
            sample_id not in failed_ids))
    return sorted(samples, key=lambda s: s.id)


def parse_accuracy(run_dir: str | Path) -> list[DatasetAccuracy]:
    """Scores, per-sample details and failed samples of every (model, dataset) of an accuracy run folder."""
    run = Path(run_dir)
    summary = summary_file(run)
    if summary is None:
        raise OutputError(run / "summary", "", "has no summary_*.csv: the run did not finish")
    out = parse_summary(summary)
    for result in out:
        model, dataset = result.model, result.dataset
        predictions = run / "predictions" / model
        failed = parse_failed(predictions / f"{dataset}_failed.jsonl")
        results = run / "results" / model / f"{dataset}.json"
        result.failed = failed
        if results.is_file():
            result.samples = parse_details(results, parse_predictions(predictions / f"{dataset}.jsonl"),
                                           {f.id for f in failed})
    return out
