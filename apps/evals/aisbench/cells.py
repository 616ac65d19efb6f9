"""One cell of an AISBench table or JSON file, read as a value, a value with a count, or nothing.

The forms AISBench writes (docs/aisbench-facts.md, "Cell forms"):
  "-" (a task that failed), "/" (no total_count), "" (a statistic the row lacks), "N/A" (tabulate's missingval)
                                      -> no value
  "75.00 (3/4)"                       -> 75.0, counted 3 of 4 (summarizers/default.py, for correct_count/total_count)
  "41.2 ms", "16.8 req/s", "195.5 token/s", 6, 1.87
                                      -> the number and its unit; times in ms
  "nan ms", "inf token/s", NaN        -> no value (the unit is kept)"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from apps.evals.aisbench.output_files import OutputError

NO_VALUE = {"", "-", "/", "N/A"}
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)"
NUMBER_WITH_UNIT = re.compile(rf"^({NUMBER})\s*([A-Za-z%/]*)$", re.IGNORECASE)
WITH_COUNT = re.compile(rf"^({NUMBER})\s*\(\s*(\d{{1,18}})\s*/\s*(\d{{1,18}})\s*\)$", re.IGNORECASE)
TIME_UNITS_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class Cell:
    value: float | None
    unit: str | None = None
    count: tuple[int, int] | None = None  # (correct, total)


def read_cell(cell: object, path: str | Path, where: str) -> Cell:
    if cell is None:
        return Cell(None)
    if isinstance(cell, bool):
        raise OutputError(path, where, f"{cell!r} is not a number")
    if isinstance(cell, int | float):
        return Cell(_finite(float(cell)))
    text = str(cell).strip()
    if text in NO_VALUE:
        return Cell(None)
    if found := WITH_COUNT.match(text):
        return Cell(_finite(float(found.group(1))), None, (int(found.group(2)), int(found.group(3))))
    found = NUMBER_WITH_UNIT.match(text)
    if not found:
        raise OutputError(path, where, f"{text[:60]!r} is not a number")
    value, unit = _finite(float(found.group(1))), found.group(2) or None
    if unit in TIME_UNITS_TO_MS:
        return Cell(None if value is None else value * TIME_UNITS_TO_MS[unit], "ms")
    return Cell(value, unit)


def read_count(cell: object, path: str | Path, where: str) -> int | None:
    """A count of requests (N): a whole number, or nothing."""
    value = read_cell(cell, path, where).value
    if value is not None and value != int(value):
        raise OutputError(path, where, f"{cell!r} is not a count")
    return None if value is None else int(value)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
