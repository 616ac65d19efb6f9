"""What conmon / containerd-shim do for one container: start its command, record its PID, wait, record its exit.

`python -m simcluster.containers monitor NODE_DIR ID`, started detached by `run`. The command runs in its own
session (so its own process group: `stop` signals the group), output and errors into `containers/<id>/log`. SIGTERM
to the monitor (what `simcluster down` sends) goes on to the container's group. When the command exits, the rest of
its group is killed (a container's processes end with its init) and the exit code is recorded (128 + signal when a
signal ended it); `--rm` then removes the container.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from simcluster import procs
from simcluster.containers import table


def _executable(argv0: str, path: str) -> str | None:
    if "/" in argv0:
        return argv0 if os.access(argv0, os.X_OK) else None
    return shutil.which(argv0, path=path)


def _update(node_dir: Path, cid: str, **state) -> dict | None:
    with table.locked(node_dir) as rows:
        row = rows.get(cid)
        if row is not None:
            row["state"].update(state)
        return row


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def monitor(node_dir: Path, cid: str) -> int:
    row = table.snapshot(node_dir)[cid]
    host = row["host"]
    cdir = table.container_dir(node_dir, cid)
    cwd = host["cwd"]
    if not os.path.isdir(cwd):  # a container path no bind mount covers: the container's own filesystem
        cwd = str(cdir / "rootfs")
        os.makedirs(cwd, exist_ok=True)
    if _executable(host["argv"][0], host["env"].get("PATH", "")) is None:
        _update(node_dir, cid, start_error=host["argv"][0], exit_code=127)
        return 127
    with open(cdir / "log", "ab") as log:
        proc = subprocess.Popen(host["argv"], env=host["env"], cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: _killpg(proc.pid, signal.SIGTERM))
    _update(node_dir, cid, status="running", pid=proc.pid, start_ticks=procs.start_time(proc.pid),
            started_at=time.time(), monitor_pid=os.getpid())
    rc = proc.wait()
    _killpg(proc.pid, signal.SIGKILL)
    exit_code = rc if rc >= 0 else 128 - rc
    with table.locked(node_dir) as rows:
        row = rows.get(cid)
        if row is not None:
            row["state"].update(status="exited", pid=0, exit_code=exit_code, finished_at=time.time())
            if row.get("auto_remove"):
                if row.get("attached"):  # the `run` in the foreground still wants the exit code
                    (table.root(node_dir) / f"{cid}.exit").write_text(str(exit_code))
                table.forget(node_dir, rows, cid)
    return 0
