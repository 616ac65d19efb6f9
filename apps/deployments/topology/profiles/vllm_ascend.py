"""`vllm-ascend` profile: the real cluster's processes, shaped after docs/ascend-pd-launch-facts.md §1 (P/D), §3 (the KV
pool: AscendStoreConnector inside a MultiConnector, mooncake_master + mooncake.json, or MemCache's MetaService +
mmc-*.conf) and our pdproxy (docs/contracts.md §4). The sim profile subclasses it and changes only what the simulator
cannot do, so a run on the simulated cluster exercises the same commands, env and config files.

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

from sshexec import EnvExtend, LaunchFile, LaunchSpec

from .. import ports
from ..allowlist import NO_ALLOWLIST, ClusterAllowlist
from ..node_facts import NodeFacts
from ..placement import assign_devices, process_devices
from ..plan import Plan, PlannedProcess, Stage
from ..plan_warnings import MOONCAKE_CLIENT_TTL_S, plan_warnings
from ..run_files import admin_token_path, config_path
from ..spec import KV_CONNECTORS, InstanceSpec, TopologySpec
from .engine_options import VLLM_ASCEND_ENV, VLLM_ASCEND_FLAGS
from .pool_files import memcache_lib_dir, mmc_local_conf, mmc_meta_conf, mooncake_json

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
    "--kv-transfer-config": "role, kv_port, tp, dp, engine_id and kv_pool (the connectors are derived)",
    "--kv-events-config": "proxy.kv_events",
})
OWNED_ENV = MappingProxyType({
    "ASCEND_RT_VISIBLE_DEVICES": "devices",
    "HCCL_IF_IP": "the node's address in the inventory",
    "MOONCAKE_MASTER": "kv_pool (it would override mooncake.json's master_server_address)",
    "MOONCAKE_CONFIG_PATH": "kv_pool (the deploy writes mooncake.json)",
    "MMC_LOCAL_CONFIG_PATH": "kv_pool (the deploy writes mmc-local.conf)",
    "PYTHONHASHSEED": "kv_pool (0 on every node, so block hashes agree)",
})
STORE_CONNECTOR = "AscendStoreConnector"


class VllmAscendProfile:
    name = "vllm-ascend"
    owned_flags = OWNED_FLAGS
    owned_env = OWNED_ENV
    allowed_flags = VLLM_ASCEND_FLAGS
    allowed_env = VLLM_ASCEND_ENV
    proxy_command: tuple[str, ...] = ("python", "-m", "pdproxy")
    uses_npus = True
    min_health_timeout = 0  # the job's health_timeout alone
    install_hints: MappingProxyType = MappingProxyType({})
    runtime = "host"  # processes over SSH, found by their pid files (sim and vllm-cpu inherit it)

    def required_files(self, spec: TopologySpec) -> dict[str, str]:
        return {}  # model.path may be a hub id here; the engine says what is missing

    def bind_host(self, node: NodeFacts) -> str:
        return node.address

    def admin_host(self, node: NodeFacts) -> str:
        return ADMIN_HOST

    def mooncake_bind_flags(self, node: NodeFacts) -> list[str]:
        # The embedded metadata server still listens on 0.0.0.0 whatever these say (docs/mooncake-on-cpu.md).
        return ["--rpc_address", node.address, "--metrics_host", node.address]

    def mmc_local_extra(self, spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, str]:
        return {}  # the simulator's stand-in keys (sim.py)

    def tokenizer_dir(self, spec: TopologySpec) -> str:
        """The proxy's --tokenizer for proxy.kv_events: the model's directory (vLLM model dirs hold tokenizer.json)."""
        return spec.model.path

    # -- the plan ---------------------------------------------------------------------------------------
    def render(self, spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> Plan:
        stages = []
        if spec.kv_pool:
            stages.append(Stage("kv_pool", self._pool(spec, nodes)))
        devices = assign_devices(spec, nodes)
        engines = tuple(p for inst in spec.instances for p in self._engine(spec, nodes, inst, devices))
        stages.append(Stage("engines", engines))
        stages.append(Stage("proxy", (self._proxy(spec, nodes, engines),)))
        return Plan(profile=self.name, stages=tuple(stages), warnings=tuple(map(str, plan_warnings(spec, nodes))))

    def _launch(self, spec: TopologySpec, key: str, argv: list[str], env: dict | None = None,
                files: tuple[LaunchFile, ...] = ()) -> LaunchSpec:
        run = PurePosixPath(spec.run_dir)
        return LaunchSpec(argv=tuple(argv), env=MappingProxyType(dict(sorted((env or {}).items()))), workdir=run,
                          log_file=run / "logs" / f"{key}.log", pid_file=run / "pids" / f"{key}.pid", files=files)

    def _engine(self, spec, nodes, inst: InstanceSpec, devices) -> list[PlannedProcess]:
        out = []
        master = nodes[inst.node]
        for slot in ports.engine_slots(inst):
            node = nodes[slot.node]
            visible = process_devices(devices[inst.name, slot.node], inst.tp, slot.local_ranks)
            env = self._engine_env(spec, nodes, node, inst, visible)
            argv = self._engine_argv(spec, node, master, inst, slot)
            listen = () if slot.api_port is None else (slot.api_port,)
            if ports.uses_dp_rpc(inst) and slot.ranks[0] == 0:
                listen += (inst.dp_rpc_port,)
            window = ports.kv_window(inst, slot.ranks)
            health = None if slot.api_port is None else f"http://{node.address}:{slot.api_port}/health"
            out.append(PlannedProcess(
                key=slot.key, role=inst.role, instance=inst.name, node=node.name, address=node.address,
                dp_rank=slot.ranks[0], launch=self._launch(spec, slot.key, argv, env, self._engine_files(spec, nodes, node)),
                health_url=health, ports=listen, kv_port_window=(window.start, window.stop - 1)))
        return out

    def _engine_env(self, spec, nodes, node: NodeFacts, inst: InstanceSpec, devices: tuple[int, ...]) -> dict:
        env: dict[str, str | EnvExtend] = dict(BASE_ENGINE_ENV)
        env.update({
            "HCCL_IF_IP": node.address,
            "GLOO_SOCKET_IFNAME": node.nic_name,
            "TP_SOCKET_IFNAME": node.nic_name,
            "HCCL_SOCKET_IFNAME": node.nic_name,
            "HCCL_BUFFSIZE": HCCL_BUFFSIZE[inst.role],
            "ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, devices)),
        })
        env.update(inst.env)
        pool = spec.kv_pool
        if pool:
            env["PYTHONHASHSEED"] = "0"  # kv_pool.md: block hashes must agree across every node
            if pool.backend == "mooncake":
                env["MOONCAKE_CONFIG_PATH"] = str(config_path(spec, "mooncake.json"))
            else:
                env["MMC_LOCAL_CONFIG_PATH"] = str(config_path(spec, "mmc-local.conf"))
                env["LD_LIBRARY_PATH"] = _prepend(memcache_lib_dir(pool), env.get("LD_LIBRARY_PATH"))
        return env

    def _engine_files(self, spec: TopologySpec, nodes, node: NodeFacts) -> tuple[LaunchFile, ...]:
        pool = spec.kv_pool
        if pool is None:
            return ()
        pool_address = nodes[pool.node].address
        if pool.backend == "mooncake":
            return (LaunchFile(config_path(spec, "mooncake.json"), mooncake_json(pool, pool_address)),)
        return (LaunchFile(config_path(spec, "mmc-local.conf"),
                           mmc_local_conf(pool, pool_address, self.mmc_local_extra(spec, nodes))),)

    def _engine_argv(self, spec, node: NodeFacts, master: NodeFacts, inst: InstanceSpec,
                     slot: ports.EngineSlot) -> list[str]:
        argv = ["vllm", "serve", spec.model.path]
        if slot.api_port is not None:
            argv += ["--host", self.bind_host(node), "--port", str(slot.api_port)]
        if inst.dp > 1 and inst.dp_style == "external":
            argv += ["--data-parallel-size", str(inst.dp), "--data-parallel-rank", str(slot.ranks[0]),
                     "--data-parallel-address", master.address, "--data-parallel-rpc-port", str(inst.dp_rpc_port)]
        elif inst.dp > 1:
            if slot.api_port is None:
                argv.append("--headless")  # DeepSeek-V3.1.md §5.2: "Only set on non-master nodes"
            argv += ["--data-parallel-size", str(inst.dp), "--data-parallel-size-local", str(len(slot.ranks)),
                     "--data-parallel-start-rank", str(slot.ranks[0]), "--data-parallel-address", master.address,
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
        events = spec.proxy.kv_events
        if events and inst.role == "prefill":
            # A wildcard endpoint: vLLM binds only those (any other one it connects to); each DP rank adds its rank.
            config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{events.port}"}
            if events.replay_port is not None:
                config["replay_endpoint"] = f"tcp://*:{events.replay_port}"
            argv += ["--kv-events-config", json.dumps(config, separators=(",", ":"))]
        return argv

    def _kv_transfer_config(self, spec: TopologySpec, inst: InstanceSpec) -> dict:
        """MooncakeConnectorV1 (pull, P2P handshake; or MooncakeLayerwiseConnector, push, by the spec's kv_connector)
        alone, or with a pool inside a MultiConnector next to AscendStoreConnector (kv_pool.md Step 2.3.1). engine_id only where the operator sets one: vllm-ascend
        generates a unique one, and a repeated manual id fails with `Conflict engine id` (§1.4). Validation
        guarantees one size per role."""
        first = {role: next(i for i in spec.instances if i.role == role) for role in ("prefill", "decode")}
        role = KV_ROLE[inst.role]
        p2p = {
            "kv_connector": KV_CONNECTORS[spec.kv_connector],
            "kv_role": role,
            "kv_port": str(inst.kv_port),
            "kv_connector_extra_config": {
                r: {"dp_size": first[r].dp, "tp_size": first[r].tp} for r in ("prefill", "decode")
            },
        }
        pool = spec.kv_pool
        top = p2p
        if pool:
            extra = {"backend": pool.backend, "lookup_rpc_port": str(spec.instances.index(inst))}
            if pool.consumer_is_to_load:
                extra["consumer_is_to_load"] = True
            if pool.consumer_is_to_put:
                extra["consumer_is_to_put"] = True
            store = {"kv_connector": STORE_CONNECTOR, "kv_role": role, "kv_connector_extra_config": extra}
            top = {"kv_connector": "MultiConnector", "kv_role": role,
                   "kv_connector_extra_config": {"connectors": [p2p, store]}}
            if pool.load_failure_policy:  # on the MultiConnector itself, never its children (kv_pool.md)
                top = {**top, "kv_load_failure_policy": pool.load_failure_policy}
        if inst.engine_id is not None:
            top = {**top, "engine_id": inst.engine_id}
        return top

    def _pool(self, spec: TopologySpec, nodes) -> tuple[PlannedProcess, ...]:
        pool, node = spec.kv_pool, nodes[spec.kv_pool.node]
        if pool.backend == "memcache":
            return (self._meta_service(spec, nodes),)
        # §3.3 Ascend doc command; --logtostderr so glog lands in our log file rather than /tmp.
        argv = ["mooncake_master", "--port", str(pool.rpc_port), *self.mooncake_bind_flags(node),
                "--metrics_port", str(pool.metrics_port), "--eviction_high_watermark_ratio", "0.9",
                "--eviction_ratio", "0.1", "--default_kv_lease_ttl", "11000", "--enable_offload=false",
                f"--client_ttl={MOONCAKE_CLIENT_TTL_S}", "--logtostderr=true"]
        return (PlannedProcess(
            key="kv-pool", role="kv_pool", instance=None, node=node.name, address=node.address, dp_rank=None,
            launch=self._launch(spec, "kv-pool", argv), health_url=f"http://{node.address}:{pool.metrics_port}/health",
            ports=(pool.rpc_port, pool.metrics_port), kv_port_window=None),)

    def _meta_service(self, spec: TopologySpec, nodes) -> PlannedProcess:
        """MemCache's MetaService on one node (kv_pool.md Step 3.4), its config written next to the run dir."""
        pool, node = spec.kv_pool, nodes[spec.kv_pool.node]
        meta = config_path(spec, "mmc-meta.conf")
        argv = ["python3", "-c", "from memcache_hybrid import MetaService; MetaService.main()"]
        env = {"MMC_META_CONFIG_PATH": str(meta), "LD_LIBRARY_PATH": _prepend(memcache_lib_dir(pool), None)}
        return PlannedProcess(
            key="kv-pool", role="kv_pool", instance=None, node=node.name, address=node.address, dp_rank=None,
            launch=self._launch(spec, "kv-pool", argv, env, (LaunchFile(meta, mmc_meta_conf(pool, node.address)),)),
            health_url=f"tcp://{node.address}:{pool.rpc_port}",
            ports=(pool.rpc_port, pool.config_store_port, pool.metrics_port), kv_port_window=None)

    def _proxy(self, spec: TopologySpec, nodes, engines: tuple[PlannedProcess, ...]) -> PlannedProcess:
        proxy, node = spec.proxy, nodes[spec.proxy.node]

        def backends(role: str) -> list[str]:  # every API server; headless DP secondaries have none
            return [f"{p.address}:{p.ports[0]}" for p in engines if p.role == role and p.health_url]

        argv = [*self.proxy_command, "--host", self.bind_host(node), "--port", str(proxy.port),
                "--prefill", *backends("prefill"), "--decode", *backends("decode"), *policy_args(proxy.policy)]
        if proxy.hash_key:
            argv += ["--hash-key", proxy.hash_key]
        if spec.kv_connector == "layerwise":  # the Decodes call back its --host (the node's address)
            argv += ["--pd-flow", "layerwise"]
            hosts = decode_hosts_specs(spec, nodes)
            if hosts:  # only a Decode whose ranks run on several nodes needs it
                argv += ["--decode-hosts", *hosts]
        if proxy.kv_events:
            argv += ["--kv-events", *kv_events_specs(spec, nodes), "--tokenizer", self.tokenizer_dir(spec)]
        argv += ["--workers", str(proxy.workers)]
        argv += ["--admin-host", self.admin_host(node), "--admin-port", str(proxy.admin_port),
                 "--admin-token-file", str(admin_token_path(spec))]  # the deploy job writes it before the start
        return PlannedProcess(
            key="proxy", role="proxy", instance=None, node=node.name, address=node.address, dp_rank=None,
            launch=self._launch(spec, "proxy", argv), health_url=f"http://{node.address}:{proxy.port}/healthcheck",
            ports=(proxy.port, proxy.admin_port), kv_port_window=None)


def kv_events_specs(spec: TopologySpec, nodes) -> list[str]:
    """pdproxy --kv-events entries, one per Prefill API server (the --prefill HOST:PORT): the publisher (and replay)
    endpoint of each DP rank it serves, on the node that runs the rank, at port + global rank."""
    events, out = spec.proxy.kv_events, []
    for inst in (i for i in spec.instances if i.role == "prefill"):
        slots = ports.engine_slots(inst)
        for api in (s for s in slots if s.api_port is not None):
            if events.port == 0 or events.replay_port == 0:  # tcp://*:0: the engines pick, the proxy asks them
                out.append(f"{nodes[api.node].address}:{api.api_port}=discover")
                continue
            served = slots if inst.dp_style == "internal" else [api]  # internal DP: one API over every node's ranks
            endpoints = []
            for slot in served:
                host = nodes[slot.node].address
                for r in slot.ranks:
                    replay = "" if events.replay_port is None else f"|tcp://{host}:{events.replay_port + r}"
                    endpoints.append(f"tcp://{host}:{events.port + r}{replay}")
            out.append(f"{nodes[api.node].address}:{api.api_port}={','.join(endpoints)}")
    return out


def decode_hosts_specs(spec: TopologySpec, nodes) -> list[str]:
    """pdproxy --decode-hosts entries (layerwise flow), one per Decode API server that serves DP ranks on other nodes
    than its own (internal DP over several nodes): each rank's engine core calls the metaserver from its node and
    names that node as remote_host, and pdproxy takes a call only from, and naming, a host of the Decode the request
    went to. HOST:PORT=the address of every node the API server serves."""
    out = []
    for inst in (i for i in spec.instances if i.role == "decode" and i.dp_style == "internal"):
        slots = ports.engine_slots(inst)
        for api in (s for s in slots if s.api_port is not None):
            addresses = list(dict.fromkeys(nodes[s.node].address for s in slots))
            if len(addresses) > 1:
                out.append(f"{nodes[api.node].address}:{api.api_port}={','.join(addresses)}")
    return out


def policy_args(policy: str) -> list[str]:
    """pdproxy's flags for the topology's policy. cache_aware is for the Prefill, whose prefix cache it aims at (a
    Decode pulls the whole KV it is sent): the Decode balances by load."""
    if policy == "cache_aware":
        return ["--policy", "least_conn", "--prefill-policy", "cache_aware"]
    return ["--policy", policy]


def _prepend(directory: str, existing: str | EnvExtend | None) -> EnvExtend:
    """The profile's library dir in front of what the operator's env adds (kv_pool.md Step 3.5.1's order)."""
    if isinstance(existing, EnvExtend):
        joined = existing.separator.join(filter(None, (directory, existing.prepend)))
        return EnvExtend(prepend=joined, append=existing.append, separator=existing.separator)
    return EnvExtend(prepend=directory)
