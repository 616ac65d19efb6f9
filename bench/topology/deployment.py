"""The bench's deployment in a throwaway database: a cluster of 64 A3 nodes x 16 NPUs and a front node, a sim
revision of 256 TP4 instances (4 per node: Prefill on the first half of the nodes, Decode on the second) with a
proxy and a Mooncake pool, created through the services as tests/telemetry/test_topology_view.py does, and
Process rows as if it were running, each pointing at its simulated metrics endpoint (targets.py)."""

from __future__ import annotations

import yaml

MODEL = {"path": "/models/Qwen3-235B-A22B", "served_name": "qwen3-235b",
         "profile": {"layers": 94, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16", "attention_heads": 64}}
PER_NODE = 4


def node_name(i: int) -> str:
    return f"n{i:02d}"


def instances(nodes: int) -> list[dict]:
    out = []
    for i in range(nodes):
        role = "prefill" if i < nodes // 2 else "decode"
        for k in range(PER_NODE):
            n = (i if role == "prefill" else i - nodes // 2) * PER_NODE + k
            out.append({"name": f"{role[0]}{n}", "role": role, "node": node_name(i), "tp": 4, "dp": 1,
                        "api_port": 7100 + k, "kv_port": 30000 + 16 * k, "max_num_seqs": 16})
    return out


def spec_yaml(nodes: int) -> str:
    return yaml.safe_dump({
        "launch_profile": "sim", "run_dir": "/var/lib/pdcp/bench-topology", "model": MODEL,
        "instances": instances(nodes),
        "kv_pool": {"backend": "mooncake", "node": "front", "rpc_port": 50088, "metrics_port": 9003,
                    "segment_size": "1GB"},
        "proxy": {"node": "front", "port": 1999, "policy": "least_conn"},
    }, sort_keys=False)


def create(nodes: int, addresses: list[str]):
    """(deployment, plan for targets.py). The nodes' own addresses are names nobody connects to (no SSH here); each
    node's processes answer on one of `addresses` (many ports each), the front's on the last."""
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster, Node, Npu, SshCredential
    from apps.inventory.services import credential_save
    from tests.keys import TEST_HOST_KEY, TEST_PRIVATE_KEY

    cluster = Cluster.objects.create(name="bench-topology", description="bench/topology: 64 x 16 NPUs")
    cred = credential_save(SshCredential(name="bench", username="bench"), secret=TEST_PRIVATE_KEY)
    rows = [Node(cluster=cluster, name=node_name(i), address=f"{node_name(i)}.bench.invalid",
                 credential=cred, host_key=TEST_HOST_KEY, hardware_model="Atlas 800I A3", npu_count=16)
            for i in range(nodes)]
    rows.append(Node(cluster=cluster, name="front", address="front.bench.invalid", credential=cred,
                     host_key=TEST_HOST_KEY))
    Node.objects.bulk_create(rows)
    Npu.objects.bulk_create(
        Npu(node=n, npu_id=d // 2, chip_id=d % 2, logical_id=d, name="Ascend910", health="OK",
            hbm_used_mb=20000 + 1500 * (d % 16), hbm_total_mb=65536)
        for n in Node.objects.filter(cluster=cluster, npu_count=16) for d in range(16))
    deployment = deployment_create(name="bench-topology", cluster=cluster, user=None, yaml_text=spec_yaml(nodes))
    address_of = {node_name(i): addresses[i % (len(addresses) - 1)] for i in range(nodes)} | {"front": addresses[-1]}
    plan = {"engines": [{"key": f"{i['name']}-dp0", "role": i["role"], "host": address_of[i["node"]],
                         "instance": i["name"], "node": i["node"]} for i in instances(nodes)],
            "proxy": address_of["front"], "pool": address_of["front"], "control": address_of["front"]}
    return deployment, plan


def processes(deployment, plan: dict, ports: dict[str, int]) -> list:
    """Process rows in state running for every engine, the proxy and the pool, at their simulated endpoints."""
    from apps.deployments.models import Process

    def row(key, role, instance, node, address, port_list, pid):
        return Process(deployment=deployment, revision=deployment.active_revision, node_name=node, role=role,
                       instance=instance, key=key, address=address, ports=port_list, command="(bench)",
                       fingerprint="bench", log_path="/dev/null", pid_file="/dev/null", state="running", pid=pid)

    rows = [row(e["key"], e["role"], e["instance"], e["node"], e["host"], [ports[e["key"]]], 40000 + k)
            for k, e in enumerate(plan["engines"])]
    rows.append(row("proxy", "proxy", "", "front", plan["proxy"], [ports["proxy"]], 39998))
    rows.append(row("kv-pool", "kv_pool", "", "front", plan["pool"], [50088, ports["kv-pool"]], 39999))
    Process.objects.bulk_create(rows)
    return list(Process.objects.filter(deployment=deployment).order_by("pk"))
