"""Cluster spec: which nodes exist, their addresses and hardware, and where the shared services run.

The default is the reference cluster of docs/reference-cluster.md. A spec file (YAML) has the same shape:
  name, nodes: [{name, address, ssh_port, hardware: A3|910B|"", role, labels}],
  services: {host, mooncake_rpc_port, mooncake_metrics_port, memcached_ports: [...]}
"""

from __future__ import annotations

from pathlib import Path

import plainyaml

HARDWARE = {"A3": ("Atlas 800I A3", "Ascend910", 16), "910B": ("Atlas 800I A2", "910B2", 8),
            "": ("server", "", 0)}


def reference_spec(prefix: str = "127.0.10", ssh_port: int = 22) -> dict:
    def node(i, name, role, hw):
        return {"name": name, "address": f"{prefix}.{i}", "ssh_port": ssh_port, "hardware": hw, "role": role,
                "labels": {"role": role, "rack": "r1"}}

    return {
        "name": "reference",
        "description": "Reference PD cluster (simulated)",
        "nodes": [node(1, "node0", "prefill", "A3"), node(2, "node1", "prefill", "A3"),
                  node(3, "node2", "decode", "A3"), node(4, "node3", "decode", "A3"),
                  node(5, "proxy", "proxy", ""), node(6, "bench", "client", "")],
        # The simulator's own KV pool agent and store live on an address of their own (.7), so a deployment
        # can place its Mooncake master and memcached on the proxy node with the reference ports.
        "services": {"host": f"{prefix}.7", "mooncake_rpc_port": 50051, "mooncake_metrics_port": 9003,
                     "memcached_ports": [11211, 11212, 11213]},
    }


def load_spec(path: str | Path | None) -> dict:
    if not path:
        return reference_spec()
    spec = plainyaml.load(Path(path).read_text())
    for n in spec["nodes"]:
        n.setdefault("ssh_port", 22)
        n.setdefault("hardware", "")
        n.setdefault("labels", {"role": n.get("role", "")})
        if n["hardware"] not in HARDWARE:
            raise ValueError(f"node {n['name']}: hardware must be one of {sorted(HARDWARE)}")
    spec.setdefault("name", "simcluster")
    spec.setdefault("services", {})
    return spec
