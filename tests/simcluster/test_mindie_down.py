"""`simcluster down` stops the simulated MindIE's pods it finds recorded below `<state-dir>/kube/`, without
delete.sh. Nodes on 127.0.10.68-.69 only."""

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from simcluster import cluster, rundirs
from simcluster.sshnode import pid_alive
from tests.simcluster.mindie_helpers import deploy, pods, put_config, user_config, wait_ready
from tests.simcluster.simtest_helpers import ssh_connect, ssh_run

pytestmark = pytest.mark.procs  # every test here starts processes or servers

SPEC = {"name": "mindie-down", "nodes": [
    {"name": "ctl", "address": "127.0.10.68", "hardware": "", "role": "proxy", "ssh_port": 22, "labels": {}},
    {"name": "a2n0", "address": "127.0.10.69", "hardware": "910B", "role": "prefill", "ssh_port": 22, "labels": {}}],
    "services": {}}


def test_down_stops_every_pod_of_every_namespace():
    root = Path(tempfile.mkdtemp(prefix="mindie-down-", dir="/tmp"))
    root.chmod(0o755)
    sdir = root / "state"
    state = cluster.up(SPEC, sdir)
    pids = []
    try:
        client = ssh_connect("127.0.10.68", 22, state["nodes"]["ctl"]["host_key"], sdir / "id_ed25519")
        doc = user_config("downjob", p=(1, 1, 4), d=(1, 1, 4), p_tp=4, d_tp=1)
        doc["deploy_config"]["hardware_type"] = "800I_A2"
        run_dir = rundirs.new_run_dir("mindie-down")
        rc, out, err = deploy(client, put_config(client, run_dir, doc))
        ssh_run(client, f"rm -rf {run_dir}")
        assert rc == 0, out + err
        wait_ready(client, "downjob")
        items = pods(client, "downjob")
        assert [i["spec"]["nodeName"] for i in items.values()] == ["ctl", "ctl", "a2n0", "a2n0"]
        pids = [int(i["metadata"]["annotations"]["sim.pdcp.dev/pid"]) for i in items.values()]
        client.close()
        assert all(pid_alive(p) for p in pids)
    finally:
        stopped = cluster.down(sdir)
        shutil.rmtree(root, ignore_errors=True)
    deadline = time.monotonic() + 10
    while [p for p in pids if pid_alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids and not [p for p in pids if pid_alive(p)], stopped
    assert sum(1 for s in stopped if s.startswith("pod:downjob/")) == 4, stopped
