"""Plain-text output: aligned tables, local times, durations; and --json."""

from __future__ import annotations

import json
import sys
from datetime import datetime


def print_json(data, out=None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    text = " ".join(str(value).split())
    return text or "-"


def table(rows: list[dict], columns: list[tuple[str, str]], out=None, *, empty: str = "(none)") -> None:
    """rows as columns of (header, key); a key's value is looked up in the row (a callable gets the row)."""
    out = out or sys.stdout
    if not rows:
        out.write(empty + "\n")
        return
    cells = [[cell(key(row) if callable(key) else row.get(key)) for _, key in columns] for row in rows]
    headers = [header for header, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    for line in [headers, *cells]:
        out.write("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip() + "\n")


def when(value: str | None) -> str | None:
    """An API timestamp in the local time zone, to the second."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return value


def clock(value: str | None) -> str:
    if not value:
        return "--:--:--"
    try:
        return datetime.fromisoformat(value).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return value[:8]


def duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def value_text(value) -> str:
    """A spec value in a diff: JSON, so strings show their quotes and absent shows as such."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
