"""Where a reliability case writes its figure: one JSON file per case below $PDCP_DATA_DIR/reliability/, which
scripts/reliability_report.py turns into the table of docs/reliability.md."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def figures_dir() -> Path:
    return Path(os.environ.get("PDCP_DATA_DIR", "data")) / "reliability"


def record_figure(case: str, *, held: str, figure: str, command: str, values: dict | None = None) -> Path:
    """case: a short stable id ("decode-killed-under-load"); held: what was checked afterwards; figure: the measured
    result in words ("1,200 sent, 1,200 answered, 0 errors"); command: what reproduces it; values: the raw numbers."""
    out = figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{case}.json"
    path.write_text(json.dumps({"case": case, "held": held, "figure": figure, "command": command,
                                "values": values or {}, "when": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
    return path
