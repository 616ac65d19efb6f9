"""The node's container table: `<node dir>/containers/table.json` ({id: record}), one writer at a time.

Every read-modify-write holds an exclusive flock on `containers/.lock`, so two `docker` invocations (or a
command and a container's monitor) never lose each other's changes; the file is replaced atomically. A
container's own files (its log, its monitor's log, a stand-in for its filesystem) live in `containers/<id>/`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path


def root(node_dir: Path) -> Path:
    path = node_dir / "containers"
    path.mkdir(exist_ok=True)
    return path


@contextlib.contextmanager
def locked(node_dir: Path):
    """The table, for changing: what the block leaves in the dict is written back."""
    base = root(node_dir)
    with open(base / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = _read(base)
        yield rows
        tmp = base / f".table.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(rows, indent=1, sort_keys=True))
        os.replace(tmp, base / "table.json")


def snapshot(node_dir: Path) -> dict:
    base = root(node_dir)
    with open(base / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        return _read(base)


def _read(base: Path) -> dict:
    try:
        return json.loads((base / "table.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def container_dir(node_dir: Path, cid: str) -> Path:
    return root(node_dir) / cid


def forget(node_dir: Path, rows: dict, cid: str) -> None:
    rows.pop(cid, None)
    shutil.rmtree(container_dir(node_dir, cid), ignore_errors=True)


def find(rows: dict, ref: str) -> dict | None:
    """docker's lookup order (moby daemon/container.go GetContainer): full id, exact name, unique id prefix."""
    if ref in rows:
        return rows[ref]
    name = ref.lstrip("/")
    for row in rows.values():
        if row["name"] == name:
            return row
    matches = [row for cid, row in rows.items() if ref and cid.startswith(ref)]
    return matches[0] if len(matches) == 1 else None
