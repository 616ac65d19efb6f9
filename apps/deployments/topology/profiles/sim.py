"""`sim` profile: the simulated cluster (docs/contracts.md §2). The vllm-ascend rendering itself — commands, env, the
KV pool's connectors and config files — because the sim nodes put `vllm`, `pdproxy` and `mooncake_master` on PATH
and the simulated engine reads the same --kv-transfer-config, mooncake.json and mmc-local.conf. What differs is what
the simulator cannot do: the proxy's executable and admin listener, the simulated model's answers (the spec's
simulation block), and MemCache, which does not run here: its MetaService is played by memcached (the `store`
ring when the spec has one), named to the engines by two extra mmc-local.conf keys.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from types import MappingProxyType

from ..node_facts import NodeFacts
from ..plan import PlannedProcess
from ..spec import InstanceSpec, TopologySpec
from .engine_options import SIM_ENV
from .vllm_ascend import OWNED_ENV, VllmAscendProfile

# What the simulated model answers (simcluster/engine/config.py reads them), from the spec's simulation block.
SIMULATION_ENV = MappingProxyType({
    "SIMCLUSTER_ANSWER_BOOK": "simulation.answer_book",
    "SIMCLUSTER_ACCURACY": "simulation.accuracy",
    "SIMCLUSTER_THINK": "simulation.think",
})
# The answer books the simulated model knows (simcluster/answer_books/<name>.jsonl): named here, not read from the
# simulator, which the product never imports; tests/test_architecture.py checks the two lists agree.
ANSWER_BOOKS = ("made-up-aime",)
# The simulated model's tokenizer (simcluster/tokenizer_dir.py), built by `make aisbench` (scripts/aisbench-venv.sh)
# where controlplane/settings.py's PDCP_SIM_TOKENIZER defaults to; the spec's model.path does not exist on sim nodes.
SIM_TOKENIZER = "/opt/pdcp-aisbench/sim-tokenizer"


class SimProfile(VllmAscendProfile):
    name = "sim"
    proxy_command = ("pdproxy",)
    allowed_env = SIM_ENV
    owned_env = MappingProxyType({**OWNED_ENV, **SIMULATION_ENV})

    def admin_host(self, node: NodeFacts) -> str:
        # Every sim node shares this machine's 127.0.0.1; the node's own loopback address keeps two simulated
        # proxies' admin listeners apart, as two machines' loopbacks would be.
        return node.address

    def tokenizer_dir(self, spec: TopologySpec) -> str:
        return SIM_TOKENIZER  # every sim node is this machine: the proxy reads the directory the AISBench runs use

    def mmc_local_extra(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, str]:
        # simcluster/engine reads these: the memcached servers that hold the pool, and how many copies of a block.
        servers = self._memcached(spec, nodes)
        replicas = spec.store.replicas if spec.store else 1
        return {"simcluster.ring": ",".join(f"{a}:{port}" for _n, a, port in servers),
                "simcluster.replicas": str(replicas)}

    def _memcached(self, spec: TopologySpec, nodes) -> list[tuple[str, str, int]]:
        if spec.store:
            return [(s.node, nodes[s.node].address, s.port) for s in spec.store.servers]
        pool = spec.kv_pool
        return [(pool.node, nodes[pool.node].address, pool.rpc_port)]

    def _pool(self, spec: TopologySpec, nodes) -> tuple[PlannedProcess, ...]:
        if spec.kv_pool.backend != "memcache":
            return super()._pool(spec, nodes)
        ring = self._memcached(spec, nodes)
        keyed = [(f"store-{i}", "store") for i in range(len(ring))] if spec.store else [("kv-pool", "kv_pool")]
        out = []
        for (node_name, address, port), (key, role) in zip(ring, keyed, strict=True):
            pid_file = PurePosixPath(spec.run_dir) / "pids" / f"{key}.pid"  # the same file _launch names
            # Foreground (no -d): the detached launcher backgrounds it and records the pid itself.
            memory = spec.store.memory_mb if spec.store else 64
            argv = ["memcached", "-l", address, "-p", str(port), "-U", "0", "-m", str(memory), "-P", str(pid_file)]
            out.append(PlannedProcess(
                key=key, role=role, instance=None, node=node_name, address=address, dp_rank=None,
                launch=self._launch(spec, key, argv), health_url=f"tcp://{address}:{port}", ports=(port,),
                kv_port_window=None))
        return tuple(out)

    def _engine_env(self, spec, nodes, node: NodeFacts, inst: InstanceSpec, devices: tuple[int, ...]) -> dict:
        env = super()._engine_env(spec, nodes, node, inst, devices)
        sim = spec.simulation
        if sim:
            env.update({"SIMCLUSTER_ANSWER_BOOK": sim.answer_book, "SIMCLUSTER_ACCURACY": str(sim.accuracy),
                        "SIMCLUSTER_THINK": "1" if sim.think else "0"})
        return env
