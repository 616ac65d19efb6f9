"""Results made elsewhere, read from what an operator uploads or pastes (issue 34, part 3):
  a .zip of an AISBench output folder: the timestamp folder, the work folder above it, or any folder holding
      summary/ and/or performances/; every run folder in it is read, in the order of their names (timestamps), and a
      later run's (model, dataset) replaces an earlier one's; a run folder with neither a summary nor a perf file
      (one that did not finish) adds nothing, a damaged file refuses the upload;
  summary_<ts>.csv, .md or .txt (summary_formats.py); a perf <ds>.json or <ds>.csv (its model is UNKNOWN);
  console output, uploaded as .txt or .log or pasted (console_output.py).
Every refusal is an OutputError naming the file (inside a zip: <zip>/<member path>), the line and the column."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from apps.evals.aisbench.accuracy_output import (
    DatasetAccuracy,
    accuracy_from_records,
    parse_accuracy,
    summary_file,
)
from apps.evals.aisbench.console_output import UNKNOWN, read_console
from apps.evals.aisbench.output_files import OutputError, csv_rows, json_value
from apps.evals.aisbench.perf_output import (
    DISTRIBUTION_COLUMNS,
    DatasetPerformance,
    distributions_from_records,
    metrics_from_json,
    parse_performance,
)
from apps.evals.aisbench.summary_formats import csv_block, summary_records
from apps.evals.aisbench.text_tables import text_lines
from apps.evals.aisbench.zip_upload import unpacked

PASTED = "pasted text"
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
SUMMARY_FORMS = {".csv": "csv", ".md": "markdown", ".txt": "text"}
RESULT_FOLDERS = ("results", "predictions", "performances")  # of a run folder, besides summary/
EXPECTED = {
    "folder": "an AISBench output folder: <YYYYmmdd_HHMMSS>/summary/summary_<ts>.csv (or .md, .txt) or "
              "<YYYYmmdd_HHMMSS>/performances/<model>/<dataset>.json, .csv or _details.jsonl",
    "summary": "an accuracy summary table: dataset, version, metric, mode, then one column per model",
    "perf": "performance metrics: <dataset>.json ({metric: {stage: value}}) or <dataset>.csv "
            "(Performance Parameters, Stage, Average, ...)",
    "console": "AISBench's console tables: the accuracy table (dataset, version, metric, mode, <model>...) or the "
               "performance tables (Performance Parameters, Stage, ...; Common Metric, Stage, Value)",
}


@dataclass
class ImportedResults:
    accuracy: list[DatasetAccuracy] = field(default_factory=list)
    performance: list[DatasetPerformance] = field(default_factory=list)
    form: str = ""  # what was read, in words: "AISBench output folder (zip)", "accuracy summary (markdown)", ...
    files: list[str] = field(default_factory=list)  # the files read (inside a zip: member paths)


def read_upload(name: str, data: bytes) -> ImportedResults:
    base = PurePosixPath(name.replace("\\", "/")).name or "upload"
    suffix = PurePosixPath(base).suffix.lower()
    if suffix == ".zip" or data[:4] in ZIP_MAGIC:
        return read_zip(base, data)
    text = data.decode("utf-8-sig", errors="replace")
    dataset = PurePosixPath(base).stem
    if suffix == ".json":
        perf = DatasetPerformance(UNKNOWN, dataset, metrics_by_stage=metrics_from_json(json_value(text, base), base))
        return found(ImportedResults([], [perf], "performance metrics (<dataset>.json)", [base]), base, "perf")
    if suffix == ".csv" and text.lstrip().startswith(DISTRIBUTION_COLUMNS[0]):
        perf = DatasetPerformance(UNKNOWN, dataset, distributions=distributions_from_records(
            csv_rows(text, base, DISTRIBUTION_COLUMNS), base))
        return found(ImportedResults([], [perf], "performance distributions (<dataset>.csv)", [base]), base, "perf")
    if suffix in (".csv", ".md") or (suffix == ".txt" and (base.startswith("summary_") or csv_block(text_lines(text)))):
        accuracy = accuracy_from_records(*summary_records(text, base), base)
        return found(ImportedResults(accuracy, [], f"accuracy summary ({SUMMARY_FORMS[suffix]})", [base]), base,
                     "summary")
    accuracy, performance = read_console(text, base)
    return found(ImportedResults(accuracy, performance, "console output", [base]), base, "console")


def read_pasted(text: str) -> ImportedResults:
    accuracy, performance = read_console(text, PASTED)
    return found(ImportedResults(accuracy, performance, "console output", [PASTED]), PASTED, "console")


def read_zip(name: str, data: bytes) -> ImportedResults:
    with unpacked(name, data) as root:
        try:
            results = read_folders(root)
        except OutputError as e:
            raise OutputError(_in_zip(name, root, e.path), e.where, e.problem) from None
    return found(results, name, "folder")


def read_folders(root: Path) -> ImportedResults:
    accuracy: dict[tuple[str, str], DatasetAccuracy] = {}
    performance: dict[tuple[str, str], DatasetPerformance] = {}
    files: list[Path] = []
    for run in run_folders(root):
        summary = summary_file(run)
        if summary is not None:
            accuracy |= {(r.model, r.dataset): r for r in parse_accuracy(run)}
            files.append(summary)
        if (run / "performances").is_dir():
            performance |= {(r.model, r.dataset): r for r in parse_performance(run)}
        files += [p for p in sorted(run.rglob("*")) if p.is_file() and _result_file(p.relative_to(run).parts)]
    return ImportedResults(list(accuracy.values()), list(performance.values()), "AISBench output folder (zip)",
                           [p.relative_to(root).as_posix() for p in files])


def run_folders(root: Path) -> list[Path]:
    """Folders holding summary/ or performances/, timestamp names (then paths) in order."""
    folders = [root, *(p for p in root.rglob("*") if p.is_dir())]
    runs = [p for p in folders if (p / "summary").is_dir() or (p / "performances").is_dir()]
    return sorted(runs, key=lambda p: (p.name, p.as_posix()))


def found(results: ImportedResults, name: str, expected: str) -> ImportedResults:
    if not results.accuracy and not any(p.stages or p.requests for p in results.performance):
        raise OutputError(name, "", f"holds no result: expected {EXPECTED[expected]}")
    return results


def _result_file(parts: tuple[str, ...]) -> bool:
    return parts[0] in RESULT_FOLDERS and "tmp" not in parts and not parts[-1].endswith(".html")


def _in_zip(name: str, root: Path, path: str) -> str:
    try:
        return f"{name}/{Path(path).relative_to(root).as_posix()}"
    except ValueError:
        return path
