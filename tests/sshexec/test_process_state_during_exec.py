"""A process in the middle of an `exec` chain is still ours: its state never reads "stopped" while it runs, and a
stop signals it (docs/ssh-execution.md: a process inside execve has an empty /proc/<pid>/environ for a moment)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from simcluster.sshnode import pid_alive
from sshexec import parse_process_state, process_state_command, stop_command
from sshexec.process_commands import MARKER_VARIABLE, process_marker

pytestmark = pytest.mark.procs  # every test here starts processes or servers

# Re-execs itself as fast as it can (every exec opens the empty-environ moment), then settles in `sleep`.
EXEC_LOOP = 'n=${1:-0}; [ "$n" -ge 20000 ] && exec sleep 60; exec sh -c "$0" "$0" $((n+1))'


def start_exec_loop(pid_file):
    env = {**os.environ, MARKER_VARIABLE: process_marker(pid_file)}
    proc = subprocess.Popen(["sh", "-c", EXEC_LOOP, EXEC_LOOP], env=env, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    return proc


def sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)


def test_state_reads_running_all_through_an_exec_chain(tmp_path):
    pid_file = tmp_path / "loop.pid"
    proc = start_exec_loop(pid_file)
    try:
        readings = {}
        # 30 readings, however long a loaded machine takes (a 3 s window once held only 16)
        deadline = time.monotonic() + 120
        while sum(readings.values()) < 30 and time.monotonic() < deadline and proc.poll() is None:
            state = parse_process_state(sh(process_state_command(pid_file)).stdout).state
            readings[state] = readings.get(state, 0) + 1
        assert proc.poll() is None
        assert sum(readings.values()) == 30, f"only {readings} within 120 s"
        assert readings == {"running": readings["running"]}, readings
    finally:
        proc.kill()
        proc.wait()


def test_stop_in_an_exec_chain_stops_it_and_never_calls_it_foreign(tmp_path):
    for attempt in range(8):
        pid_file = tmp_path / f"loop{attempt}.pid"
        proc = start_exec_loop(pid_file)
        try:
            time.sleep(0.05 * attempt)
            result = sh(stop_command(pid_file, grace_seconds=2))
            assert result.stdout.split() == ["stopped", str(proc.pid)], (result.stdout, result.stderr)
            proc.wait(10)
            assert not pid_alive(proc.pid)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
