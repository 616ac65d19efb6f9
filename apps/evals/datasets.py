"""The datasets an operator can pick: AISBench's own sets (files the operator must provide: nothing can be
downloaded here), the made-up demo set the simulated model knows, and uploaded JSONL sets."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .models import EvalDataset

REPO = Path(__file__).resolve().parent.parent.parent
MADE_UP_AIME = REPO / "simcluster" / "answer_books" / "made-up-aime.jsonl"
SCORED_FAMILIES = ("aime", "gsm8k")  # families the config writer knows how to score
MAX_UPLOAD_BYTES = 20 << 20
MAX_QUESTION_CHARS = 100_000


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    family: str
    title: str
    relative_file: str  # below PDCP_EVALS_DIR/datasets/ (the same layout as AISBench's own ais_bench/datasets/)
    source: str  # where an operator gets the file
    builtin: Path | None = None  # shipped with the project
    simulated_only: bool = False


CATALOGUE = (
    CatalogueEntry("made-up-aime", "aime", "Made-up AIME-style set (NOT aime2025; the simulated model's answer book)",
                   "", "shipped with the project (simcluster/answer_books/made-up-aime.jsonl)",
                   builtin=MADE_UP_AIME, simulated_only=True),
    CatalogueEntry("aime2025", "aime", "AIME 2025 (30 problems)", "aime2025/aime2025.jsonl",
                   "aime2025.zip from the OpenCompass dataset bucket named in AISBench's README (JSONL: question, answer)"),
    CatalogueEntry("aime2024", "aime", "AIME 2024 (30 problems)", "aime2024/aime2024.jsonl",
                   "aime2024 from the OpenCompass dataset bucket named in AISBench's README (JSONL: question, answer)"),
    CatalogueEntry("gsm8k", "gsm8k", "GSM8K (grade-school math, test split)", "gsm8k/test.jsonl",
                   "gsm8k.zip from the OpenCompass dataset bucket named in AISBench's README"),
    CatalogueEntry("ceval", "ceval", "C-Eval (multiple choice, Chinese)", "ceval/formal_ceval/val",
                   "ceval-exam.zip from the OpenCompass dataset bucket named in AISBench's README"),
    CatalogueEntry("mmlu", "mmlu", "MMLU (multiple choice)", "mmlu/test",
                   "mmlu.zip from the OpenCompass dataset bucket named in AISBench's README"),
)


@dataclass(frozen=True)
class DatasetChoice:
    key: str  # catalogue:<name> | upload:<name>
    name: str
    family: str
    title: str
    path: Path
    present: bool
    lines: int | None
    runnable: bool
    problem: str  # why it cannot run (missing file, unscored family), empty when it can
    simulated_only: bool = False


def datasets_root() -> Path:
    return Path(settings.PDCP_EVALS_DIR) / "datasets"


def uploads_root() -> Path:
    return Path(settings.PDCP_EVALS_DIR) / "uploads"


def _count_lines(path: Path) -> int | None:
    try:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


def _catalogue_choice(entry: CatalogueEntry) -> DatasetChoice:
    path = entry.builtin or datasets_root() / entry.relative_file
    present = path.exists()
    problem = ""
    if not present:
        problem = f"file not present: put it at {path} ({entry.source})"
    elif entry.family not in SCORED_FAMILIES:
        problem = f"present, but runs of the {entry.family} family are not built yet (scored here: aime, gsm8k)"
    lines = _count_lines(path) if present and path.is_file() else None
    return DatasetChoice(f"catalogue:{entry.name}", entry.name, entry.family, entry.title, path, present, lines,
                         runnable=not problem, problem=problem, simulated_only=entry.simulated_only)


def _upload_choice(ds: EvalDataset) -> DatasetChoice:
    path = uploads_root() / ds.file_name
    present = path.is_file()
    return DatasetChoice(f"upload:{ds.name}", ds.name, ds.family, ds.description or f"uploaded {ds.family} set",
                         path, present, ds.lines, runnable=present,
                         problem="" if present else f"the uploaded file is missing from {path}")


def dataset_choices() -> list[DatasetChoice]:
    return [_catalogue_choice(e) for e in CATALOGUE] + [_upload_choice(d) for d in EvalDataset.objects.all()]


def dataset_choice(key: str) -> DatasetChoice | None:
    """One choice by key, reading only its own file (dataset_choices counts the lines of every file)."""
    kind, _, name = key.partition(":")
    if kind == "catalogue":
        entry = next((e for e in CATALOGUE if e.name == name), None)
        return _catalogue_choice(entry) if entry else None
    if kind == "upload":
        dataset = EvalDataset.objects.filter(name=name).first()
        return _upload_choice(dataset) if dataset else None
    return None


class DatasetFileError(ValueError):
    """An uploaded file that cannot be a dataset; `line` is 1-based (0: the file as a whole)."""

    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


def validate_jsonl(data: bytes, family: str) -> int:
    """Check every line before anything is stored; returns the number of items."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise DatasetFileError(0, f"the file is larger than {MAX_UPLOAD_BYTES >> 20} MB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DatasetFileError(line, "not UTF-8 text") from None
    count = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DatasetFileError(number, f"not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(item, dict):
            raise DatasetFileError(number, "expected a JSON object like {\"question\": ..., \"answer\": ...}")
        question, answer = item.get("question"), item.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise DatasetFileError(number, "'question' is missing or not a non-empty string")
        if len(question) > MAX_QUESTION_CHARS:
            raise DatasetFileError(number, f"'question' is longer than {MAX_QUESTION_CHARS} characters")
        if isinstance(answer, bool) or not isinstance(answer, str | int) or not str(answer).strip():
            raise DatasetFileError(number, "'answer' is missing (a string or an integer)")
        if family == "aime" and not str(answer).strip().lstrip("-").isdigit():
            raise DatasetFileError(number, f"'answer' must be an integer for an AIME-style set, got {answer!r}")
        if family == "gsm8k" and "####" not in str(answer):
            raise DatasetFileError(number, "'answer' must end with '#### <number>' for a GSM8K-style set")
        count += 1
    if not count:
        raise DatasetFileError(0, "the file holds no items")
    return count


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
