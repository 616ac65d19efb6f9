"""A small simulated cluster for the health tests (addresses 127.0.10.50-.53): node0 with a Prefill, node1 with a
Decode, the proxy host and the bench host; the topology 1P1D (TP16 each) with the sim launch profile, no KV pool."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import yaml

from tests.waiting import wait_until  # noqa: F401  (re-exported)

REPO = Path(__file__).resolve().parents[2]
NODES = (("node0", "127.0.10.50", "A3", "prefill"), ("node1", "127.0.10.51", "A3", "decode"),
         ("proxy", "127.0.10.52", "", "proxy"), ("bench", "127.0.10.53", "", "client"))
CLUSTER = "health-sim"


def cluster_spec() -> dict:
    return {"name": CLUSTER, "description": "health tests (simulated)", "services": {},
            "nodes": [{"name": n, "address": a, "ssh_port": 22, "hardware": hw, "role": role,
                       "labels": {"role": role}} for n, a, hw, role in NODES]}


def start_cluster():
    from simcluster import cluster

    state_dir = Path(tempfile.mkdtemp(prefix="pdcp-health-sim-", dir="/tmp"))
    state_dir.chmod(0o755)
    try:
        state = cluster.up(cluster_spec(), state_dir)
    except BaseException:
        cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        raise
    return state_dir, state


def stop_cluster(state_dir: Path) -> None:
    from simcluster import cluster

    try:
        cluster.down(state_dir)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def topology_yaml(run_dir: str) -> str:
    data = yaml.safe_load((REPO / "examples" / "reference-topology-fixed.yaml").read_text())
    data["launch_profile"] = "sim"
    data["run_dir"] = run_dir
    p0 = next(i for i in data["instances"] if i["name"] == "p0")
    d0 = next(i for i in data["instances"] if i["name"] == "d0")
    d0.update(node="node1", tp=16, dp=1)  # one engine process; TP4 x DP1 cannot hold Qwen3-235B's weights (HBM fit)
    d0.pop("dp_rpc_port", None)
    data["instances"] = [p0, d0]
    for inst in data["instances"]:
        inst.setdefault("env", {})["SIMCLUSTER_STARTUP_S"] = "0.2"
    data.pop("kv_pool", None)
    data["bench_client"] = {"node": "bench"}
    return yaml.safe_dump(data, sort_keys=False)


def import_inventory(state: dict):
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    inventory_import(Path(state["inventory"]).read_text(), allow_key_files=True)
    return Cluster.objects.get(name=CLUSTER)


