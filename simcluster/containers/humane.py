"""Times and sizes as docker prints them (github.com/docker/go-units HumanDuration and HumanSize, Go's time formats)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

ZERO_TIME = "0001-01-01T00:00:00Z"


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = int(seconds / 60)
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = int(seconds / 3600 + 0.5)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{hours // 24 // 365} years"


def ago(t: float) -> str:
    return duration(time.time() - t) + " ago"


def rfc3339nano(t: float | None) -> str:
    if not t:
        return ZERO_TIME
    whole = int(t)
    frac = f"{int(round((t - whole) * 1e9)) % 10**9:09d}".rstrip("0")
    return datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def go_time(t: float) -> str:
    """time.Time's String() in UTC: `2021-03-10 00:15:05 +0000 UTC`."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def size(n: float) -> str:
    """HumanSizeWithPrecision(n, 3): decimal units, three significant digits."""
    units = ["B", "kB", "MB", "GB", "TB", "PB"]
    i = 0
    while n >= 1000 and i < len(units) - 1:
        n /= 1000
        i += 1
    return f"{n:.3g}{units[i]}"


def ram_in_bytes(text: str) -> int:
    """go-units RAMInBytes: `1g`, `512m`, `1.5GiB`, a plain number of bytes; binary multiples."""
    import re

    m = re.fullmatch(r"(\d+(?:\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?", text)
    if not m:
        raise ValueError(f"invalid size: '{text}'")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}[(m.group(2) or "").lower()]
    return int(float(m.group(1)) * mult)


def table(rows: list[list[str]], *, minwidth: int, padding: int) -> str:
    """text/tabwriter as docker (minwidth 10, padding 3) and podman (12, 2) set it up; the last column unpadded."""
    if not rows:
        return ""
    widths = [max(minwidth, max(len(r[i]) for r in rows) + padding) for i in range(len(rows[0]) - 1)]
    lines = ["".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + r[-1] for r in rows]
    return "\n".join(lines) + "\n"
