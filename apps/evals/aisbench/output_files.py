"""Reading AISBench's output files so that any bad input becomes an OutputError naming the file and place."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
Records = Iterator[tuple[int, dict[str, str]]]  # a table's rows: (line number, {column: cell})


class OutputError(Exception):
    """An AISBench output file that is missing, truncated or not in the shape it should be."""

    def __init__(self, path: str | Path, where: str, problem: str):
        self.path, self.where, self.problem = str(path), where, problem
        super().__init__(f"{path}{':' + where if where else ''}: {problem}")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise OutputError(path, "", f"cannot be read ({e.strerror})") from None


def read_json(path: Path) -> object:
    return json_value(read_text(path), path)


def json_value(text: str, path: str | Path) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise OutputError(path, f"line {e.lineno}", f"not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:  # nested too deeply; an integer of over 4300 digits
        raise OutputError(path, "", f"not valid JSON ({str(e)[:80] or 'nested too deeply'})") from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise OutputError(path, f"line {number}", f"not valid JSON ({e.msg})") from None
        except (ValueError, RecursionError) as e:
            raise OutputError(path, f"line {number}", f"not valid JSON ({str(e)[:80] or 'nested too deeply'})") from None
        if not isinstance(row, dict):
            raise OutputError(path, f"line {number}", "is not a JSON object")
        yield number, row


def read_csv(path: Path, required: tuple[str, ...]) -> Records:
    """Rows (with their 1-based line number, the header being line 1) holding every required column."""
    return csv_rows(read_text(path), path, required)


def csv_rows(text: str, path: str | Path, required: tuple[str, ...],
             first_line: int = 1) -> Records:
    """read_csv over text that starts at line first_line of the file at path."""
    reader = csv.DictReader(text.splitlines())
    try:
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise OutputError(path, f"line {first_line}", f"missing column(s) {', '.join(missing)}")
        for row in reader:
            number = first_line - 1 + reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise OutputError(path, f"line {number}", "has a different number of cells than the header")
            yield number, row
    except csv.Error as e:  # e.g. a cell past csv's field size limit
        raise OutputError(path, f"line {first_line - 1 + reader.line_num}", f"not valid CSV ({e})") from None


def need(row: dict, key: str, kind: type | tuple[type, ...], path: Path, where: str) -> object:
    if key not in row:
        raise OutputError(path, where, f"has no {key!r}")
    value, kinds = row[key], kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise OutputError(path, where, f"{key!r} is {type(value).__name__}, not {names}")
    return value


def prompt_text(prompt: object) -> str:
    """An AISBench prompt (a string, or a list of {role, prompt|content} turns) as plain text."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n\n".join(prompt_text(turn.get("prompt", turn.get("content", "")) if isinstance(turn, dict) else turn)
                           for turn in prompt)
    return "" if prompt is None else str(prompt)
