"""A run dir other local users can reach is refused, and stop/state act only on a process our start made.

Real sshd nodes (tests/sshexec/conftest.py), login user `simnode`; every run dir lives in a fresh 0700 directory below
simnode's home (simcluster/rundirs.py), except where a test asks for a bad place on purpose.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest

from simcluster.rundirs import new_run_dir
from simcluster.sshnode import pid_alive
from sshexec import (
    LaunchSpec,
    SshConnection,
    detached_start_command,
    parse_process_state,
    process_state_command,
    stop_command,
    tail_command,
)

pytestmark = pytest.mark.procs  # every test here starts processes or servers


@pytest.fixture
def base():
    """A fresh private directory owned by simnode (the login user) for one test's run dirs and bait files."""
    path = new_run_dir("safety")
    os.mkdir(path, 0o700)
    owner = Path(path).parent.stat()
    os.chown(path, owner.st_uid, owner.st_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sleeper(conn: SshConnection) -> int:
    """An unrelated process of the login user (its own process group), as a planted pid file would name."""
    result = conn.run("setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $!", timeout=10)
    assert result.ok, result.stderr
    pid = int(result.stdout)
    deadline = time.monotonic() + 3
    while not Path(f"/proc/{pid}/cmdline").exists() or b"sleep" not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return pid


def refused(conn: SshConnection, spec: LaunchSpec, *words: str) -> str:
    result = conn.run(detached_start_command(spec), timeout=15)
    if result.ok:
        os.kill(int(result.stdout), signal.SIGKILL)  # never leave it running, even when this test fails
    assert not result.ok, f"started although it should be refused: {result.stdout!r}"
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


def test_a_symlinked_log_file_is_refused_and_its_target_is_not_overwritten(target, base):
    run = f"{base}/run"
    victim = f"{base}/precious.txt"
    spec = LaunchSpec(argv=("sleep", "300"), workdir=run, log_file="logs/p0.log", pid_file="pids/p0.pid")
    with SshConnection(target) as conn:
        setup = conn.run(f"umask 077; mkdir -p {run}/logs {run}/pids && echo precious > {victim} && "
                         f"ln -s {victim} {run}/logs/p0.log", timeout=10)
        assert setup.ok, setup.stderr
        refused(conn, spec, f"{run}/logs/p0.log", "symbolic link")
        assert Path(victim).read_text() == "precious\n"
        assert not Path(f"{run}/pids/p0.pid").exists()  # nothing started


def test_a_symlinked_pid_file_is_refused(target, base):
    run = f"{base}/run"
    victim = f"{base}/precious.txt"
    spec = LaunchSpec(argv=("sleep", "300"), workdir=run)
    with SshConnection(target) as conn:
        assert conn.run(f"umask 077; mkdir -p {run} && echo precious > {victim} && "
                        f"ln -s {victim} {run}/process.pid", timeout=10).ok
        refused(conn, spec, f"{run}/process.pid", "symbolic link")
        assert Path(victim).read_text() == "precious\n"


def test_a_run_dir_below_a_group_writable_directory_is_refused(target, base):
    shared = f"{base}/shared"
    spec = LaunchSpec(argv=("sleep", "300"), workdir=f"{shared}/run")
    with SshConnection(target) as conn:
        assert conn.run(f"mkdir {shared} && chmod 775 {shared}", timeout=10).ok
        refused(conn, spec, shared, "writable by group or others")
        assert not Path(f"{shared}/run").exists()


def test_a_run_dir_below_tmp_is_refused(target):
    run = f"/tmp/pdcp-refused-{os.getpid()}"
    spec = LaunchSpec(argv=("sleep", "300"), workdir=run)
    with SshConnection(target) as conn:
        refused(conn, spec, "/tmp", "writable by group or others")
    assert not Path(run).exists()


def test_a_symlinked_run_dir_component_is_refused(target, base):
    spec = LaunchSpec(argv=("sleep", "300"), workdir=f"{base}/link/run")
    with SshConnection(target) as conn:
        assert conn.run(f"mkdir {base}/real && ln -s {base}/real {base}/link", timeout=10).ok
        refused(conn, spec, f"{base}/link", "symbolic link")
    assert not Path(f"{base}/real/run").exists()


def test_a_run_dir_below_another_users_directory_is_refused(target, base):
    theirs, run = Path(base, "theirs"), Path(base, "theirs", "run")
    theirs.mkdir(mode=0o755)
    run.mkdir(mode=0o700)
    owner = Path(base).stat()
    os.chown(run, owner.st_uid, owner.st_gid)  # the run dir is ours ...
    os.chown(theirs, 65534, 65534)  # ... but nobody (not root, not the login user) could swap it for another
    spec = LaunchSpec(argv=("sleep", "300"), workdir=str(run))
    with SshConnection(target) as conn:
        refused(conn, spec, str(theirs), "owned by")


def test_a_run_dir_the_login_user_does_not_own_is_refused(target, base):
    rooted = Path(base, "rooted")
    rooted.mkdir(mode=0o755)  # root's, as the test runs as root; fine above a run dir, not as the run dir
    spec = LaunchSpec(argv=("sleep", "300"), workdir=str(rooted))
    with SshConnection(target) as conn:
        refused(conn, spec, str(rooted), "not owned by the login user")


def test_what_the_start_creates_is_private(target, base):
    run = f"{base}/a/run"
    spec = LaunchSpec(argv=("sleep", "300"), workdir=run, log_file="logs/x.log", pid_file="pids/x.pid")
    with SshConnection(target) as conn:
        result = conn.run(detached_start_command(spec), timeout=15)
        assert result.ok, result.stderr
        pid = int(result.stdout)
        try:
            modes = {p: stat.S_IMODE(os.stat(p).st_mode) for p in
                     (f"{base}/a", run, f"{run}/logs", f"{run}/pids", f"{run}/logs/x.log", f"{run}/pids/x.pid")}
            assert modes == {f"{base}/a": 0o700, run: 0o700, f"{run}/logs": 0o700, f"{run}/pids": 0o700,
                             f"{run}/logs/x.log": 0o600, f"{run}/pids/x.pid": 0o600}
        finally:
            stopped = conn.run(stop_command(f"{run}/pids/x.pid", grace_seconds=3), timeout=15)
        assert stopped.stdout == f"stopped {pid}\n"
        assert not pid_alive(pid)


def test_a_planted_pid_file_naming_an_unrelated_process_is_neither_reported_nor_signalled(target, base):
    run = f"{base}/run"
    with SshConnection(target) as conn:
        pid = sleeper(conn)
        try:
            assert conn.run(f"umask 077; mkdir -p {run} && echo {pid} > {run}/process.pid", timeout=10).ok
            state = parse_process_state(conn.run(process_state_command(f"{run}/process.pid"), timeout=10).stdout)
            assert (state.state, state.pid) == ("stopped", pid)
            stopped = conn.run(stop_command(f"{run}/process.pid", grace_seconds=1), timeout=15)
            assert stopped.ok, stopped.stderr
            assert stopped.stdout == f"foreign {pid}\n"
            time.sleep(0.3)
            assert pid_alive(pid), "stop signalled a process it did not start"
            assert not Path(f"{run}/process.pid").exists()
        finally:
            os.kill(pid, signal.SIGKILL)


def test_a_pid_file_naming_another_run_dirs_process_is_foreign(target, base):
    """Same user, same kind of start, other slot: the marker is per pid file, not merely 'started by us'."""
    first, second = f"{base}/one", f"{base}/two"
    with SshConnection(target) as conn:
        result = conn.run(detached_start_command(LaunchSpec(argv=("sleep", "300"), workdir=first)), timeout=15)
        assert result.ok, result.stderr
        pid = int(result.stdout)
        try:
            assert conn.run(f"umask 077; mkdir -p {second} && echo {pid} > {second}/process.pid", timeout=10).ok
            assert conn.run(stop_command(f"{second}/process.pid"), timeout=15).stdout == f"foreign {pid}\n"
            assert pid_alive(pid)
            state = parse_process_state(conn.run(process_state_command(f"{first}/process.pid"), timeout=10).stdout)
            assert (state.state, state.pid) == ("running", pid)
        finally:
            conn.run(stop_command(f"{first}/process.pid", grace_seconds=3), timeout=15)
        assert not pid_alive(pid)


def test_tail_refuses_a_symlinked_log(target, base):
    with SshConnection(target) as conn:
        assert conn.run(f"umask 077; echo the-secret > {base}/key && ln -s {base}/key {base}/p0.log", timeout=10).ok
        result = conn.run(tail_command(f"{base}/p0.log", 5), timeout=10)
    assert not result.ok
    assert "the-secret" not in result.stdout + result.stderr
    assert "symbolic link" in result.stderr
