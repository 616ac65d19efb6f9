"""`sim` profile: the simulated cluster (contracts §2). Same command shapes as vllm-ascend, because the sim
nodes put `vllm`, `pdproxy`, `mooncake_master` and `memcached` on PATH; what changes is that every listener binds
the node's own 127.0.10.x address (all sim nodes share one machine, so 0.0.0.0 would collide across nodes) and
mooncake_master gets its loopback flags (stack-notes §1: it defaults to 0.0.0.0 for rpc and metrics).
"""

from __future__ import annotations

from ..inventory_facts import NodeFacts
from ..spec import TopologySpec
from .vllm_ascend import VllmAscendProfile


class SimProfile(VllmAscendProfile):
    name = "sim"
    proxy_command = ("pdproxy",)

    def bind_host(self, node: NodeFacts) -> str:
        return node.address

    def mooncake_bind_flags(self, node: NodeFacts) -> list[str]:
        return ["--rpc_address", node.address, "--metrics_host", node.address]

    def store_env(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, str]:
        # simcluster.engine backs KV up to these memcached servers (simcluster/engine/config.py).
        if not spec.store:
            return {}
        return {"SIMCLUSTER_ASCENDSTORE": ",".join(f"{nodes[s.node].address}:{s.port}" for s in spec.store.servers)}
