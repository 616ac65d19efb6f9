"""What a `vllm-cpu` topology must be in this first version (profiles/vllm_cpu.py, docs/real-engine.md): one engine
process per instance, NixlConnector's pull flow, no KV pool, KV events only on ports the engine picks, no NPU dies. Each rule names the field and
the fix. The simulation block, which only the simulator reads, is refused by engine_rules.simulation_rules."""

from __future__ import annotations

from .problem import Problem, instance_path
from .spec import TopologySpec

PROFILE = "vllm-cpu"


def cpu_rules(spec: TopologySpec, out: list[Problem]) -> None:
    if spec.launch_profile != PROFILE:
        return
    for inst in spec.instances:
        # TP over CPU processes needs a gloo group per instance on distinct ports, and DP a coordinator and
        # one NIXL side channel per rank: neither was measured here, and the nodes run ~3 GB per engine process.
        for field, value in (("tp", inst.tp), ("dp", inst.dp)):
            if value != 1:
                out.append(Problem(instance_path(spec, inst, field), f"{inst.name}: {field.upper()}{value}, but "
                                   f"the {PROFILE} profile runs one engine process per instance ({field.upper()}1): "
                                   "tensor and data parallelism on CPU engines are not supported yet",
                                   f"set {field}: 1, and add instances for more capacity"))
        if len(inst.span) > 1:
            out.append(Problem(instance_path(spec, inst, "nodes"), f"{inst.name} spans {len(inst.span)} nodes, but "
                               f"a {PROFILE} instance is one process on one node", "set node: and remove nodes:"))
        if inst.devices is not None:
            out.append(Problem(instance_path(spec, inst, "devices"), f"{inst.name}: a {PROFILE} engine runs on "
                               "CPUs and uses no NPU dies", "remove devices"))
        if inst.expert_parallel:
            out.append(Problem(instance_path(spec, inst, "expert_parallel"), f"{inst.name}: expert parallelism "
                               f"needs TP x DP above 1, which the {PROFILE} profile does not run",
                               "set expert_parallel: false"))
    if spec.kv_connector != "pull":
        out.append(Problem("kv_connector", f"kv_connector {spec.kv_connector}: the {PROFILE} profile renders "
                           "NixlConnector, whose Decode pulls the KV from the Prefill (there is no layerwise push)",
                           "set kv_connector: pull, or remove it"))
    if spec.kv_pool:
        out.append(Problem("kv_pool", f"the {PROFILE} profile has no CPU KV pool: AscendStoreConnector with "
                           "Mooncake or MemCache is Ascend-only", "remove kv_pool"))
    if spec.store:
        out.append(Problem("store", f"store is the simulator's stand-in for MemCache; the {PROFILE} profile has no "
                           "KV pool for it to serve", "remove store"))
    events = spec.proxy.kv_events
    if events:
        for field, value in (("port", events.port), ("replay_port", events.replay_port)):
            if value:
                out.append(Problem(f"proxy.kv_events.{field}", f"vLLM binds its KV events {field.replace('_', ' ')} "
                                   f"tcp://*:{value} on every interface of the node; the {PROFILE} profile keeps "
                                   "every listener on the node's address",
                                   f"set {field}: 0: the engine binds a port of its choosing on the node's address "
                                   "and the proxy asks it where (GET /kv_event_sources)"))
