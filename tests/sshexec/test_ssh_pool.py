"""Concurrency: many threads on one connection, and bounded fan-out of 64 commands over 8 nodes."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sshexec import SshConnection, SshPool, SshTarget, SshUnreachable, run_on_many

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_many_threads_share_one_connection(target):
    with SshConnection(target) as conn:
        def one(i: int) -> str:
            return conn.run(f"echo token-{i}; echo err-{i} >&2", timeout=20).stdout
        with ThreadPoolExecutor(max_workers=16) as pool:
            outputs = list(pool.map(one, range(64)))
        assert outputs == [f"token-{i}\n" for i in range(64)]
        assert conn.connects == 1  # one TCP connection carried all 64 channels


def test_64_commands_over_8_nodes_in_parallel(targets):
    pairs = [(targets[i % 8], f"echo $SIMCLUSTER_NODE {i}; cat /proc/loadavg >/dev/null") for i in range(64)]
    lines: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def collect(name: str, stream: str, line: str) -> None:
        with lock:
            lines.append((name, stream, line))

    with SshPool() as pool:
        results = pool.run_on_many(pairs, max_parallel=16, timeout=20, on_output=collect)
        connects = [pool.connection(t).connects for t in targets]
    assert [r.target for r in results] == [f"node{i % 8}" for i in range(64)]
    assert all(r.ok for r in results)
    assert [r.result.stdout for r in results] == [f"node{i % 8} {i}\n" for i in range(64)]
    assert sorted(lines) == sorted((f"node{i % 8}", "stdout", f"node{i % 8} {i}") for i in range(64))
    assert connects == [1] * 8


def test_fan_out_bound_is_respected(targets, ssh_root):
    # Each command counts the commands running at that moment in a directory shared by all nodes.
    shared = ssh_root / "bound"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    cmd = (f"f={shared}/$$; touch $f || exit 9; sleep 0.1; n=$(ls {shared} | wc -l); sleep 0.2; "
           "rm -f $f; echo $n")
    results = run_on_many([(t, cmd) for t in targets], max_parallel=2, timeout=20)
    assert all(r.ok for r in results), [r.result.stderr if r.result else r.error for r in results]
    peaks = [int(r.result.stdout) for r in results]
    assert max(peaks) == 2


def test_one_unreachable_target_does_not_stop_the_others(targets):
    ghost = SshTarget("ghost", "127.0.10.169", 22, "simnode", targets[0].private_key, None, targets[0].host_key)
    results = run_on_many([(targets[0], "echo fine"), (ghost, "echo never"), (targets[1], "echo fine")],
                          max_parallel=3, connect_retries=0)
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, SshUnreachable) and results[1].result is None
