"""Did an AISBench run succeed? Decided from its files, never from its exit code, which is 0 when a task failed
(docs/aisbench-facts.md, "Exit codes and failures")."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from apps.evals.aisbench.accuracy_output import DatasetAccuracy, parse_accuracy
from apps.evals.aisbench.output_files import OutputError, read_text, strip_ansi
from apps.evals.aisbench.perf_output import DatasetPerformance, parse_performance
from apps.evals.aisbench.rundir import latest_run_dir

TAIL_LINES = 30
MAX_LINE = 500
ERROR_LINE = re.compile(r"\[ERROR\]\s*(.*?)(?:\s*\|\s*Visit https?://\S+ for further help\.?)?$")

# (pattern over the logs and console, the reason in plain words; {0} is the first group)
KNOWN_ERRORS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"Cannot connect to host (\S+?)(?: ssl:\S+)? \[(?:Connect call failed|Connection refused)"),
     "the endpoint {0} refused the connection: nothing is listening there (is the server up?)"),
    (re.compile(r"Cannot connect to host (\S+?)(?: ssl:\S+)? \[(?!Connect call failed|Connection refused)"),
     "the endpoint {0} could not be reached"),
    (re.compile(r"TINFER-RUNTIME-001|all warmup requests failed"),
     "the warmup request failed, so AISBench stopped before sending the benchmark"),
    (re.compile(r"Tokenizer path '([^']*)' does not exist"),
     "performance mode needs the served model's tokenizer directory on this machine; '{0}' does not exist"),
    (re.compile(r"\bNot Found\b"),
     "the endpoint answered 404 Not Found: check the base URL (no /v1 at its end) and the served model name"),
    (re.compile(r"(?:TimeoutError|ServerTimeoutError|timed out)"), "requests timed out"),
    (re.compile(r"^FileNotFoundError: .*No such file or directory: '([^']+)'"), "a file is missing: {0}"),
    (re.compile(r"SUMM-FILE-001|Can't find any details perf data"),
     "no request was recorded, so no performance summary could be computed"),
]


@dataclass
class Verdict:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)


def log_files(run: Path) -> list[Path]:
    return sorted(p for p in run.glob("logs/*/**/*.out") if p.parts[len(run.parts) + 1] in ("infer", "eval", "perf"))


def clean_lines(text: str) -> list[str]:
    """ANSI-stripped lines; a tqdm line rewritten with \\r keeps its last state."""
    out = []
    for line in strip_ansi(text).split("\n"):
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "").rstrip()
        if line:
            out.append(line[:MAX_LINE])
    return out


def log_tail(run: Path) -> list[str]:
    tail = []
    for path in log_files(run):
        tail.append(f"--- {path.relative_to(run)} ---")
        tail.extend(clean_lines(read_text(path))[-TAIL_LINES:])
    return tail


def explain(texts: list[str]) -> list[str]:
    """The known errors found in these texts, in plain words."""
    found: list[str] = []
    for text in texts:
        for line in clean_lines(text):
            for pattern, words in KNOWN_ERRORS:
                if (match := pattern.search(line)) and (reason := words.format(*match.groups())) not in found:
                    found.append(reason)
    return found


def failure_counts(total: int, errors: list[str]) -> str:
    common = ", ".join(f"{error} x{count}" for error, count in Counter(errors).most_common(3))
    if total and len(errors) >= total:
        return f"every request failed ({len(errors)} of {total}): {common}"
    return f"{len(errors)} of {total or '?'} requests failed: {common}"


def accuracy_problems(run: Path, results: list[DatasetAccuracy]) -> list[str]:
    problems = []
    for result in results:
        name = f"{result.model}/{result.dataset}"
        if result.score is None:
            problems.append(f"{name}: no score (its infer or eval task failed)")
        elif not (run / "results" / result.model / f"{result.dataset}.json").is_file():
            problems.append(f"{name}: no results file")
        if result.failed:
            total = len(result.samples) or len(result.failed)
            problems.append(f"{name}: {failure_counts(total, [f.error for f in result.failed])}; "
                            "failed requests count as wrong answers")
    return problems


def perf_problems(results: list[DatasetPerformance]) -> list[str]:
    problems = []
    for result in results:
        name = f"{result.model}/{result.dataset}"
        failed = [r.error or "unknown error" for r in result.requests if not r.success]
        if failed:
            problems.append(f"{name}: {failure_counts(len(result.requests), failed)}")
        if not result.metrics:
            problems.append(f"{name}: no performance summary ({result.dataset}.json) was written")
    return problems


def judge(work_dir: str | Path, mode: str, console: str = "") -> Verdict:
    """mode: "accuracy" or "performance". console: the main process's captured stdout+stderr, if any (some
    failures, e.g. a missing tokenizer in perf mode, are only told there)."""
    if mode not in ("accuracy", "performance"):
        raise ValueError(f"mode: must be accuracy or performance, got {mode!r}")
    run = latest_run_dir(work_dir)
    if run is None:
        reasons = [f"AISBench made no run folder in {work_dir}: it stopped before starting"]
        return Verdict(False, reasons + explain([console]), clean_lines(console)[-TAIL_LINES:])
    try:
        problems = check_run(run, mode)
        logs = [read_text(p) for p in log_files(run)]
    except OutputError as e:
        problems, logs = [str(e)], []
    problems += error_lines(logs + [console])
    if not problems:
        return Verdict(True)
    known = explain(logs + [console])
    return Verdict(False, known + [p for p in problems if p not in known], safe_tail(run))


def error_lines(texts: list[str], limit: int = 3) -> list[str]:
    found: list[str] = []
    for text in texts:
        for line in clean_lines(text):
            if (match := ERROR_LINE.search(line)) and (words := f"AISBench logged an error: {match.group(1)}") not in found:
                found.append(words)
    return found[:limit]


def check_run(run: Path, mode: str) -> list[str]:
    if mode == "accuracy":
        results = parse_accuracy(run)
        return accuracy_problems(run, results) or ([] if results else ["the summary lists no dataset"])
    results = parse_performance(run)
    if not results:
        return ["no request was recorded (no performances/<model>/<dataset>.json, .csv or _details.jsonl)"]
    return perf_problems(results)


def safe_tail(run: Path) -> list[str]:
    try:
        return log_tail(run)
    except OutputError as e:
        return [str(e)]
