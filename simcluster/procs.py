"""Start background processes detached from the caller and stop them strictly by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from simcluster.sshnode import pid_alive


def spawn(argv: list[str], log: Path, env: dict | None = None) -> int:
    """Start argv in its own session (it outlives `simcluster up`); output goes to log."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    return proc.pid


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def start_time(pid: int) -> int | None:
    """Clock ticks after boot when pid started (/proc/<pid>/stat field 22): tells a reused PID apart."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def stop_pid(pid: int, timeout: float = 5.0) -> bool:
    """SIGTERM, wait (zombie-aware), then SIGKILL. True if it was running."""
    if not pid_alive(pid):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout
        time.sleep(0.02)
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    # Our own children would otherwise stay zombies; for others' children this is a no-op.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
