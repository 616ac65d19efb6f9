"""`sim` profile: the simulated cluster (docs/contracts.md §2). Same command shapes and bind addresses as vllm-ascend (every
listener on the node's own 127.0.10.x address, which matters doubly here: all sim nodes share one machine, so a
wildcard would collide across nodes), because the sim nodes put `vllm`, `pdproxy`, `mooncake_master` and
`memcached` on PATH; what changes is the proxy's executable and the engines' store env.
"""

from __future__ import annotations

from ..node_facts import NodeFacts
from ..spec import TopologySpec
from .engine_options import SIM_ENV
from .vllm_ascend import VllmAscendProfile


class SimProfile(VllmAscendProfile):
    name = "sim"
    proxy_command = ("pdproxy",)
    allowed_env = SIM_ENV

    def admin_host(self, node: NodeFacts) -> str:
        # Every sim node shares this machine's 127.0.0.1; the node's own loopback address keeps two simulated
        # proxies' admin listeners apart, as two machines' loopbacks would be.
        return node.address

    def store_env(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, str]:
        # simcluster.engine backs KV up to these memcached servers (simcluster/engine/config.py).
        if not spec.store:
            return {}
        return {"SIMCLUSTER_ASCENDSTORE": ",".join(f"{nodes[s.node].address}:{s.port}" for s in spec.store.servers)}
