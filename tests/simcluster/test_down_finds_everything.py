"""`down` stops what the control plane started over SSH even when its pid files live outside the node dir
(a deployment's run_dir), so Ctrl-C on `make run` leaves nothing running."""

import time

import pytest

from simcluster import cluster
from simcluster.sshnode import pid_alive
from tests.simcluster.simtest_helpers import ssh_connect, ssh_run

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_down_stops_processes_started_over_ssh_outside_the_node_dir(state_root):
    spec = {"name": "t", "nodes": [{"name": "n0", "address": "127.0.10.139", "hardware": "", "role": "proxy",
                                    "ssh_port": 22, "labels": {}}], "services": {}}
    sdir = state_root / "down-sim"
    state = cluster.up(spec, sdir)
    try:
        node = state["nodes"]["n0"]
        client = ssh_connect("127.0.10.139", 22, node["host_key"], str(sdir / "id_ed25519"))
        elsewhere = "/tmp/pdcp-down-test-run"
        status, out, err = ssh_run(client, f"mkdir -p {elsewhere}; cd {elsewhere}; setsid nohup sh -c 'echo $$ > "
                              f"{elsewhere}/sleeper.pid; exec sleep 300' > /dev/null 2>&1 < /dev/null & "
                              f"sleep 0.3; cat {elsewhere}/sleeper.pid")
        client.close()
        assert status == 0, err
        pid = int(out.strip())
        assert pid_alive(pid)
    finally:
        stopped = cluster.down(sdir)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid), f"left running: {pid} (down stopped {stopped})"
    assert any(entry.endswith(f":{pid}") for entry in stopped)


def test_a_process_in_the_middle_of_an_exec_chain_is_still_found(tmp_path):
    """A process inside execve reads as an empty environ for a moment (docs/ssh-execution.md): `down` must not
    miss, and leave running, a launch that is still exec'ing its way to the binary."""
    import os
    import pwd
    import subprocess

    loop = 'n=${1:-0}; [ "$n" -ge 20000 ] && exec sleep 60; exec sh -c "$0" "$0" $((n+1))'
    node_dir = str(tmp_path / "node-exec")
    proc = subprocess.Popen(["sh", "-c", loop, loop], env={**os.environ, "SIMCLUSTER_NODE_DIR": node_dir},
                            user="simnode", cwd="/", start_new_session=True)
    try:
        uid = pwd.getpwnam("simnode").pw_uid
        misses = sum(proc.pid not in cluster._processes_with_env("SIMCLUSTER_NODE_DIR", node_dir, uid)
                     for _ in range(400))
        assert proc.poll() is None
        assert misses == 0
    finally:
        proc.kill()
        proc.wait()
