"""AISBench writes each run into <work_dir>/<YYYYmmdd_HHMMSS>/; the caller can't name it, only find it."""

from __future__ import annotations

import re
from pathlib import Path

RUN_NAME = re.compile(r"\d{8}_\d{6}")


def latest_run_dir(work_dir: str | Path) -> Path | None:
    """The newest run folder under work_dir (the `-w` folder), or None before the run has made one."""
    root = Path(work_dir)
    if not root.is_dir():
        return None
    runs = sorted(p.name for p in root.iterdir() if RUN_NAME.fullmatch(p.name) and p.is_dir())
    return root / runs[-1] if runs else None
