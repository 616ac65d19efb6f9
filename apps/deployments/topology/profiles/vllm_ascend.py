"""`vllm-ascend` profile: the real cluster's processes, shaped after docs/ascend-pd-launch-facts.md §1 (P/D), §3.3 (pool), our
pdproxy (docs/contracts.md §4) and memcached as the store. The sim profile subclasses it and changes only executables and
the store's env, so a dry run on the simulated cluster exercises the same command shapes.

Every listener binds the node's own inventory address, never every interface: the engines, the proxy (pdproxy
refuses a wildcard --host), memcached and mooncake_master (whose rpc and metrics default to 0.0.0.0,
docs/ascend-pd-launch-facts.md §3.3). The proxy's admin API gets its own listener on the proxy node's 127.0.0.1, so only a
command run on that node (sshexec.probe_commands.proxy_admin_command) reaches it; its bearer token is a file below
run_dir (topology/run_files.py), so a rolling restart can drain an instance.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from types import MappingProxyType

from sshexec import LaunchSpec

from .. import ports
from ..node_facts import NodeFacts
from ..placement import assign_devices, process_devices
from ..plan import Plan, PlannedProcess, Stage
from ..run_files import admin_token_path
from ..spec import InstanceSpec, TopologySpec
from .engine_options import VLLM_ASCEND_ENV, VLLM_ASCEND_FLAGS

# §1.2 (pd_disaggregation_mooncake_multi_node.md); HCCL_BUFFSIZE is 256 on P and 600 on D in that doc.
BASE_ENGINE_ENV = {
    "OMP_PROC_BIND": "false",
    "OMP_NUM_THREADS": "10",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "TASK_QUEUE_ENABLE": "1",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "VLLM_USE_V1": "1",
}
HCCL_BUFFSIZE = {"prefill": "256", "decode": "600"}
ADMIN_HOST = "127.0.0.1"  # the proxy admin API's listener, on the proxy node itself
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}

OWNED_FLAGS = MappingProxyType({
    "--host": "nothing (the profile binds the node's address)",
    "--port": "api_port",
    "--tensor-parallel-size": "tp",
    "--data-parallel-size": "dp",
    "--data-parallel-rank": "dp (one process per rank in external DP)",
    "--data-parallel-size-local": "dp and dp_style: internal",
    "--data-parallel-start-rank": "dp_style",
    "--data-parallel-address": "node",
    "--data-parallel-rpc-port": "dp_rpc_port",
    "--headless": "dp_style",
    "--enable-expert-parallel": "expert_parallel: true",
    "--served-model-name": "model.served_name",
    "--max-num-seqs": "max_num_seqs",
    "--max-model-len": "max_model_len",
    "--kv-transfer-config": "role, kv_port, tp and dp (kv_role and extra_config sizes are derived)",
})
OWNED_ENV = MappingProxyType({
    "ASCEND_RT_VISIBLE_DEVICES": "devices",
    "HCCL_IF_IP": "the node's address in the inventory",
    "MOONCAKE_MASTER": "kv_pool",
    "SIMCLUSTER_ASCENDSTORE": "store",
})


class VllmAscendProfile:
    name = "vllm-ascend"
    owned_flags = OWNED_FLAGS
    owned_env = OWNED_ENV
    allowed_flags = VLLM_ASCEND_FLAGS
    allowed_env = VLLM_ASCEND_ENV
    proxy_command: tuple[str, ...] = ("python", "-m", "pdproxy")

    def bind_host(self, node: NodeFacts) -> str:
        return node.address

    def admin_host(self, node: NodeFacts) -> str:
        return ADMIN_HOST

    def mooncake_bind_flags(self, node: NodeFacts) -> list[str]:
        # The embedded metadata server still listens on 0.0.0.0 whatever these say (docs/mooncake-on-cpu.md).
        return ["--rpc_address", node.address, "--metrics_host", node.address]

    def store_env(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, str]:
        return {}  # real engines reach the store through the pool connector's own config, not env

    # -- the plan ---------------------------------------------------------------------------------------
    def render(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> Plan:
        stages = []
        if spec.store:
            stages.append(Stage("store", tuple(self._store(spec, nodes, i) for i in range(len(spec.store.servers)))))
        if spec.kv_pool:
            stages.append(Stage("kv_pool", (self._kv_pool(spec, nodes),)))
        devices = assign_devices(spec, nodes)
        engines = tuple(p for inst in spec.instances for p in self._engine(spec, nodes, inst, devices[inst.name]))
        stages.append(Stage("engines", engines))
        stages.append(Stage("proxy", (self._proxy(spec, nodes, engines),)))
        return Plan(profile=self.name, stages=tuple(stages))

    def _launch(self, spec: TopologySpec, key: str, argv: list[str], env: dict[str, str] | None = None) -> LaunchSpec:
        run = PurePosixPath(spec.run_dir)
        return LaunchSpec(argv=tuple(argv), env=MappingProxyType(dict(sorted((env or {}).items()))), workdir=run,
                          log_file=run / "logs" / f"{key}.log", pid_file=run / "pids" / f"{key}.pid")

    def _engine(self, spec, nodes, inst: InstanceSpec, devices: tuple[int, ...]) -> list[PlannedProcess]:
        node = nodes[inst.node]
        out = []
        for port, ranks in zip(ports.api_ports(inst), ports.dp_ranks_per_process(inst), strict=True):
            key = inst.name if inst.dp_style == "internal" else f"{inst.name}-dp{ranks[0]}"
            env = self._engine_env(spec, nodes, node, inst, process_devices(devices, inst.tp, ranks))
            argv = self._engine_argv(spec, node, inst, port, ranks)
            listen = (port, inst.dp_rpc_port) if ports.uses_dp_rpc(inst) and ranks[0] == 0 else (port,)
            window = ports.kv_window(inst, ranks)
            out.append(PlannedProcess(
                key=key, role=inst.role, instance=inst.name, node=node.name, address=node.address,
                dp_rank=ranks[0], launch=self._launch(spec, key, argv, env),
                health_url=f"http://{node.address}:{port}/health", ports=listen,
                kv_port_window=(window.start, window.stop - 1)))
        return out

    def _engine_env(self, spec, nodes, node: NodeFacts, inst: InstanceSpec, devices: tuple[int, ...]) -> dict[str, str]:
        env = dict(BASE_ENGINE_ENV)
        env.update({
            "HCCL_IF_IP": node.address,
            "GLOO_SOCKET_IFNAME": node.nic_name,
            "TP_SOCKET_IFNAME": node.nic_name,
            "HCCL_SOCKET_IFNAME": node.nic_name,
            "HCCL_BUFFSIZE": HCCL_BUFFSIZE[inst.role],
            "ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, devices)),
        })
        if spec.kv_pool:
            # Mooncake's documented override of master_server_address (docs/ascend-pd-launch-facts.md §3.2).
            env["MOONCAKE_MASTER"] = f"{nodes[spec.kv_pool.node].address}:{spec.kv_pool.rpc_port}"
        env.update(self.store_env(spec, nodes))
        env.update(inst.env)
        return env

    def _engine_argv(self, spec, node: NodeFacts, inst: InstanceSpec, port: int, ranks: tuple[int, ...]) -> list[str]:
        argv = ["vllm", "serve", spec.model.path, "--host", self.bind_host(node), "--port", str(port)]
        if inst.dp > 1 and inst.dp_style == "external":
            argv += ["--data-parallel-size", str(inst.dp), "--data-parallel-rank", str(ranks[0]),
                     "--data-parallel-address", node.address, "--data-parallel-rpc-port", str(inst.dp_rpc_port)]
        elif inst.dp > 1:
            argv += ["--data-parallel-size", str(inst.dp), "--data-parallel-size-local", str(len(ranks)),
                     "--data-parallel-start-rank", str(ranks[0]), "--data-parallel-address", node.address,
                     "--data-parallel-rpc-port", str(inst.dp_rpc_port)]
        argv += ["--tensor-parallel-size", str(inst.tp)]
        if inst.expert_parallel:
            argv.append("--enable-expert-parallel")
        argv += ["--served-model-name", spec.model.served_name]
        if inst.max_model_len:
            argv += ["--max-model-len", str(inst.max_model_len)]
        if inst.max_num_seqs:
            argv += ["--max-num-seqs", str(inst.max_num_seqs)]
        argv += list(inst.extra_args)
        argv += ["--kv-transfer-config", json.dumps(self._kv_transfer_config(spec, inst), separators=(",", ":"))]
        return argv

    def _kv_transfer_config(self, spec: TopologySpec, inst: InstanceSpec) -> dict:
        """MooncakeConnectorV1 (pull, P2P handshake). engine_id is never set: vllm-ascend generates a unique one
        and a repeated manual id fails with `Conflict engine id` (§1.4). Validation guarantees one size per role."""
        first = {role: next(i for i in spec.instances if i.role == role) for role in ("prefill", "decode")}
        return {
            "kv_connector": "MooncakeConnectorV1",
            "kv_role": KV_ROLE[inst.role],
            "kv_port": str(inst.kv_port),
            "kv_connector_extra_config": {
                role: {"dp_size": first[role].dp, "tp_size": first[role].tp} for role in ("prefill", "decode")
            },
        }

    def _kv_pool(self, spec: TopologySpec, nodes) -> PlannedProcess:
        pool, node = spec.kv_pool, nodes[spec.kv_pool.node]
        # §3.3 Ascend doc command; --logtostderr so glog lands in our log file rather than /tmp.
        argv = ["mooncake_master", "--port", str(pool.rpc_port), *self.mooncake_bind_flags(node),
                "--metrics_port", str(pool.metrics_port), "--eviction_high_watermark_ratio", "0.9",
                "--eviction_ratio", "0.1", "--default_kv_lease_ttl", "11000", "--enable_offload=false",
                "--client_ttl=120", "--logtostderr=true"]
        return PlannedProcess(
            key="kv-pool", role="kv_pool", instance=None, node=node.name, address=node.address, dp_rank=None,
            launch=self._launch(spec, "kv-pool", argv), health_url=f"http://{node.address}:{pool.metrics_port}/health",
            ports=(pool.rpc_port, pool.metrics_port), kv_port_window=None)

    def _store(self, spec: TopologySpec, nodes, index: int) -> PlannedProcess:
        server = spec.store.servers[index]
        node = nodes[server.node]
        key = f"store-{index}"
        pid_file = PurePosixPath(spec.run_dir) / "pids" / f"{key}.pid"  # the same file _launch names
        # Foreground (no -d): the detached launcher backgrounds it and records the pid itself.
        argv = ["memcached", "-l", self.bind_host(node), "-p", str(server.port), "-U", "0",
                "-m", str(spec.store.memory_mb), "-P", str(pid_file)]
        return PlannedProcess(
            key=key, role="store", instance=None, node=node.name, address=node.address, dp_rank=None,
            launch=self._launch(spec, key, argv), health_url=f"tcp://{node.address}:{server.port}",
            ports=(server.port,), kv_port_window=None)

    def _proxy(self, spec: TopologySpec, nodes, engines: tuple[PlannedProcess, ...]) -> PlannedProcess:
        proxy, node = spec.proxy, nodes[spec.proxy.node]

        def backends(role: str) -> list[str]:
            return [f"{p.address}:{p.ports[0]}" for p in engines if p.role == role]

        argv = [*self.proxy_command, "--host", self.bind_host(node), "--port", str(proxy.port),
                "--prefill", *backends("prefill"), "--decode", *backends("decode"), "--policy", proxy.policy]
        if proxy.hash_key:
            argv += ["--hash-key", proxy.hash_key]
        argv += ["--admin-host", self.admin_host(node), "--admin-port", str(proxy.admin_port),
                 "--admin-token-file", str(admin_token_path(spec))]  # the deploy job writes it before the start
        return PlannedProcess(
            key="proxy", role="proxy", instance=None, node=node.name, address=node.address, dp_rank=None,
            launch=self._launch(spec, "proxy", argv), health_url=f"http://{node.address}:{proxy.port}/healthcheck",
            ports=(proxy.port, proxy.admin_port), kv_port_window=None)
