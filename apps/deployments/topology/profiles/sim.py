"""`sim` profile: the simulated cluster (docs/contracts.md §2). Same command shapes and bind addresses as vllm-ascend (every
listener on the node's own 127.0.10.x address, which matters doubly here: all sim nodes share one machine, so a
wildcard would collide across nodes), because the sim nodes put `vllm`, `pdproxy`, `mooncake_master` and
`memcached` on PATH; what changes is the proxy's executable, the engines' store env and, from the spec's simulation
block, what the simulated model answers.
"""

from __future__ import annotations

from types import MappingProxyType

from ..node_facts import NodeFacts
from ..spec import InstanceSpec, TopologySpec
from .engine_options import SIM_ENV
from .vllm_ascend import OWNED_ENV, VllmAscendProfile

# What the simulated model answers (simcluster/engine/config.py reads them), from the spec's simulation block.
SIMULATION_ENV = MappingProxyType({
    "SIMCLUSTER_ANSWER_BOOK": "simulation.answer_book",
    "SIMCLUSTER_ACCURACY": "simulation.accuracy",
    "SIMCLUSTER_THINK": "simulation.think",
})


class SimProfile(VllmAscendProfile):
    name = "sim"
    proxy_command = ("pdproxy",)
    allowed_env = SIM_ENV
    owned_env = MappingProxyType({**OWNED_ENV, **SIMULATION_ENV})

    def admin_host(self, node: NodeFacts) -> str:
        # Every sim node shares this machine's 127.0.0.1; the node's own loopback address keeps two simulated
        # proxies' admin listeners apart, as two machines' loopbacks would be.
        return node.address

    def store_env(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, str]:
        # simcluster.engine backs KV up to these memcached servers (simcluster/engine/config.py).
        if not spec.store:
            return {}
        return {"SIMCLUSTER_ASCENDSTORE": ",".join(f"{nodes[s.node].address}:{s.port}" for s in spec.store.servers)}

    def _engine_env(self, spec, nodes, node: NodeFacts, inst: InstanceSpec, devices: tuple[int, ...]) -> dict[str, str]:
        env = super()._engine_env(spec, nodes, node, inst, devices)
        sim = spec.simulation
        if sim:
            env.update({"SIMCLUSTER_ANSWER_BOOK": sim.answer_book, "SIMCLUSTER_ACCURACY": str(sim.accuracy),
                        "SIMCLUSTER_THINK": "1" if sim.think else "0"})
        return env
