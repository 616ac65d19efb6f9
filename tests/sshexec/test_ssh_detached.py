"""Detached start/stop over real SSH: hostile values arrive intact, nothing is left running."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from simcluster.rundirs import new_run_dir
from simcluster.sshnode import pid_alive
from sshexec import (
    LaunchSpec,
    SshConnection,
    SshTargetInvalid,
    detached_start_command,
    parse_process_state,
    process_state_command,
    stop_command,
    tail_command,
)

HOSTILE = ["it's", 'say "hi"', "$(touch PWNED)", "`touch PWNED`", "a;b", "x && y", "line1\nline2", "$HOME",
           "*", "--flag", " lead", "back\\slash", "|", "-", "\t", "ünï", "'", '"', "", "%s", "a=b"]

DUMPER = """import json, os, sys, time
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}), flush=True)
time.sleep(120)
"""


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group pgid, read from /proc on this machine."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


@pytest.fixture
def runs():
    """A fresh directory for this test's run dirs, below the login user's private root (never below /tmp: the
    start refuses a run dir other users could reach)."""
    path = new_run_dir("detached")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start(conn: SshConnection, spec: LaunchSpec) -> int:
    started = time.monotonic()
    result = conn.run(detached_start_command(spec), timeout=15)
    assert result.ok, result.stderr
    assert time.monotonic() - started < 3, "the channel must not wait for the detached process"
    return int(result.stdout)


@pytest.mark.procs
def test_hostile_values_reach_the_process_exactly(target, farm, runs):
    state = farm[0].state_dir
    workdir = f"{runs}/w 'q' $(touch PWNED) `x` ;z\nnl"
    env = {"HOSTILE_1": "it's $(touch PWNED) `id`; z\nnew", "HOSTILE_2": '"\\', "EMPTY": "", "PAIR": "k=v"}
    spec = LaunchSpec(argv=("/usr/bin/python3", f"{state}/dump.py", *HOSTILE), env=env, workdir=workdir,
                      log_file="logs/l 'o' $(g).log", pid_file="run/p;`d`.pid")
    with SshConnection(target) as conn:
        conn.put_text(f"{state}/dump.py", DUMPER)
        pid = start(conn, spec)
        try:
            deadline = time.monotonic() + 5
            while True:
                log = conn.run(tail_command(f"{workdir}/logs/l 'o' $(g).log", 1))
                if log.stdout.strip() or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            dumped = json.loads(log.stdout)
            assert dumped["argv"] == HOSTILE
            assert {k: dumped["env"].get(k) for k in env} == env
            assert dumped["env"]["SIMCLUSTER_NODE"] == "node0"  # the session env is inherited
            assert dumped["cwd"] == workdir
            assert parse_process_state(conn.run(process_state_command(f"{workdir}/run/p;`d`.pid")).stdout).pid == pid
            # Where an unquoted $(touch PWNED) would have run: the workdir, the home, the state dir.
            assert conn.run(f"find {state} {runs} ~ /tmp -maxdepth 3 -name PWNED 2>/dev/null | wc -l").stdout == "0\n"
        finally:
            stopped = conn.run(stop_command(f"{workdir}/run/p;`d`.pid", grace_seconds=5), timeout=20)
        assert stopped.stdout == f"stopped {pid}\n"
        assert not pid_alive(pid)


@pytest.mark.procs
def test_start_then_stop_leaves_no_process_of_the_group(target, runs):
    base = f"{runs}/grp"
    spec = LaunchSpec(argv=("sh", "-c", "sleep 300 & exec sleep 301"), workdir=base)
    with SshConnection(target) as conn:
        pid = start(conn, spec)
        try:
            deadline = time.monotonic() + 3
            while len(group_members(pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(group_members(pid)) == 2  # the leader (own session) and its background child
            assert parse_process_state(conn.run(process_state_command(f"{base}/process.pid")).stdout).state == "running"
        finally:
            stopped = conn.run(stop_command(f"{base}/process.pid", grace_seconds=5), timeout=20)
        assert stopped.stdout == f"stopped {pid}\n"
        deadline = time.monotonic() + 2
        while group_members(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group_members(pid) == []
        assert conn.run(process_state_command(f"{base}/process.pid")).stdout == "no-pid-file\n"
        assert conn.run(stop_command(f"{base}/process.pid")).stdout == "no-pid-file\n"


@pytest.mark.procs
def test_a_process_ignoring_term_is_killed_after_the_grace(target, runs):
    base = f"{runs}/stubborn"
    spec = LaunchSpec(argv=("sh", "-c", "trap '' TERM; sleep 300 & wait; sleep 300"), workdir=base)
    with SshConnection(target) as conn:
        pid = start(conn, spec)
        started = time.monotonic()
        stopped = conn.run(stop_command(f"{base}/process.pid", grace_seconds=0.5), timeout=20)
        assert stopped.stdout == f"stopped {pid}\n"
        assert 0.4 < time.monotonic() - started < 5
        deadline = time.monotonic() + 2
        while group_members(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group_members(pid) == []


def test_launch_spec_refuses_what_the_shell_or_env_would_misread():
    with pytest.raises(SshTargetInvalid, match="argv is empty"):
        LaunchSpec(argv=(), workdir="/w")
    with pytest.raises(SshTargetInvalid, match="argv"):
        LaunchSpec(argv=("A=B", "x"), workdir="/w")
    with pytest.raises(SshTargetInvalid, match="argv"):
        LaunchSpec(argv=("-i",), workdir="/w")
    with pytest.raises(SshTargetInvalid, match="not a shell identifier"):
        LaunchSpec(argv=("x",), env={"BAD-NAME": "1"}, workdir="/w")
    with pytest.raises(SshTargetInvalid, match="not a shell identifier"):
        LaunchSpec(argv=("x",), env={"$(id)": "1"}, workdir="/w")


def test_launch_spec_refuses_a_relative_workdir_and_our_own_marker_variable():
    with pytest.raises(SshTargetInvalid, match="absolute"):
        LaunchSpec(argv=("x",), workdir="run")
    with pytest.raises(SshTargetInvalid, match="PDCP_PROCESS"):
        LaunchSpec(argv=("x",), workdir="/w", env={"PDCP_PROCESS": "0123456789abcdef"})


def test_the_launch_never_follows_an_and_chain():
    command = detached_start_command(LaunchSpec(argv=("x",), workdir="/w"))
    before_launch = command.split("PDCP_PROCESS=")[0]  # the launch begins with the marker assignment
    assert before_launch.rstrip().endswith(";") and not before_launch.rstrip().endswith("&&")
