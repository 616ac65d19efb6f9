"""`python -m simcluster up` / `down` end to end: inventory, SSH, vllm shim, npu-smi, the engine (as the login user)
in the Mooncake pool its mooncake.json names, nothing left."""

import json
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from simcluster.sshnode import pid_alive
from tests.simcluster.simtest_helpers import (
    REPO,
    free_port,
    pool_kv_config,
    sim_env,
    ssh_connect,
    ssh_run,
    wait_http,
)

pytestmark = pytest.mark.procs  # every test here starts processes or servers

SVC = "127.0.10.143"


def cli(*args, timeout=60):
    out = subprocess.run([sys.executable, "-m", "simcluster", *args], capture_output=True, text=True,
                         env=sim_env(), cwd=REPO, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_up_serves_a_pd_request_over_ssh_and_down_leaves_nothing(state_root):
    spec = {"name": "t", "nodes": [
        {"name": "p0", "address": "127.0.10.140", "hardware": "A3", "role": "prefill"},
        {"name": "d0", "address": "127.0.10.141", "hardware": "910B", "role": "decode"},
        {"name": "proxy", "address": "127.0.10.142", "hardware": "", "role": "proxy"}],
        "services": {"host": SVC, "mooncake_rpc_port": free_port(SVC), "mooncake_metrics_port": free_port(SVC),
                     "memcached_ports": [free_port(SVC) for _ in range(3)]}}
    (state_root / "spec.yaml").write_text(yaml.safe_dump(spec))
    sdir = state_root / "sim"
    t0 = time.monotonic()
    cli("up", "--spec", str(state_root / "spec.yaml"), "--state-dir", str(sdir))
    up_seconds = time.monotonic() - t0
    engine_pid = None
    try:
        assert up_seconds < 20
        inv = yaml.safe_load((sdir / "inventory.yaml").read_text())
        assert inv["version"] == 1 and inv["credentials"][0]["username"] == "simnode"
        nodes = {n["name"]: n for n in inv["clusters"][0]["nodes"]}
        assert nodes["p0"]["npu_count"] == 16 and nodes["d0"]["npu_count"] == 8 and nodes["proxy"]["npu_count"] == 0
        key = inv["credentials"][0]["private_key_file"]
        p0 = ssh_connect("127.0.10.140", 22, nodes["p0"]["host_key"], key)
        kv = json.dumps(pool_kv_config("kv_producer", 30000, 0, tp=(4, 1)))
        mooncake = json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
                               "master_server_address": f"{SVC}:{spec['services']['mooncake_rpc_port']}",
                               "global_segment_size": "1GB", "preferred_segment": False,
                               "prefer_alloc_in_same_node": True})
        # What the control plane sends: mooncake.json into the run dir, then a detached start with the pool's env,
        # pid file written by the child itself. The engine runs as the unprivileged login user and starts its own
        # Mooncake store client (unshare -rn) for the master mooncake.json names: `up`'s.
        rc, out, err = ssh_run(p0, "mkdir -p $SIMCLUSTER_NODE_DIR/run; cd $SIMCLUSTER_NODE_DIR/run; "
                               f"printf '%s' '{mooncake}' > mooncake.json; "
                               "export PYTHONHASHSEED=0 MOONCAKE_CONFIG_PATH=$PWD/mooncake.json; "
                               "ASCEND_RT_VISIBLE_DEVICES=4,5,6,7 SIMCLUSTER_STARTUP_S=0 setsid nohup sh -c "
                               "'echo $$ > p.pid; exec vllm serve /m --host 0.0.0.0 --port 7100 -tp 4 "
                               f"--kv-transfer-config '\\''{kv}'\\''' > p.log 2>&1 < /dev/null & sleep 0.2; cat p.pid")
        assert rc == 0, err
        engine_pid = int(out.split()[0])
        wait_http("http://127.0.10.140:7100/health")
        rc, seen, _ = ssh_run(p0, f"ps -o user= -p {engine_pid}; ls $SIMCLUSTER_NODE_DIR")
        assert seen.split()[0] == "simnode" and "lookup_rpc_port_0_dp_rank0" in seen, seen
        rc, smi, _ = ssh_run(p0, "npu-smi info")
        assert f"| {engine_pid:<14}|" in smi and smi.count(str(engine_pid)) == 4
        body = json.dumps({"model": "/m", "prompt": " ".join(["a"] * 300), "max_tokens": 1,
                           "kv_transfer_params": {"do_remote_decode": True}}).encode()
        resp = json.loads(urllib.request.urlopen(urllib.request.Request(
            "http://127.0.10.140:7100/v1/completions", body, {"Content-Type": "application/json"}), timeout=20).read())
        assert resp["kv_transfer_params"]["remote_port"] == 30000
        p0.close()
        metrics_url = f"http://{SVC}:{spec['services']['mooncake_metrics_port']}/metrics"
        deadline = time.monotonic() + 5
        while "master_key_count 2" not in urllib.request.urlopen(metrics_url, timeout=5).read().decode():
            assert time.monotonic() < deadline, "prefix blocks never reached the Mooncake pool"
            time.sleep(0.2)
    finally:
        state = json.loads((sdir / "state.json").read_text())
        cli("down", "--state-dir", str(sdir))
    pids = list(state["pids"].values()) + ([engine_pid] if engine_pid else [])
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if pid_alive(p)]
