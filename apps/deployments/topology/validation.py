"""Rules a topology must pass against an inventory, each Problem naming the field and a concrete fix: here the
instances, nodes, devices and P/D sizes; the engine options and the ports in engine_rules.py and port_rules.py, the
HBM fit in hbm_rules.py.

Run when a revision is saved and again right before a job runs (NPU health changes in between). A profile whose
engines run on CPUs (vllm-cpu: profile.uses_npus False) is not asked for NPUs, dies or HBM; its own limits are in
cpu_rules.py.
"""

from __future__ import annotations

from .allowlist import NO_ALLOWLIST, ClusterAllowlist
from .container_rules import container_rules
from .cpu_rules import cpu_rules
from .engine_rules import engine_allowed, engine_owned, simulation_rules
from .hbm_rules import fit_problems
from .mindie_rules import expert_parallel_rules, mindie_rules
from .node_facts import NodeFacts
from .placement import assign_devices
from .pool_rules import pool_rules
from .port_rules import port_clashes
from .problem import Problem, instance_path
from .profiles import uses_npus
from .spec import TopologySpec

__all__ = ["Problem", "validate_topology"]


def validate_topology(spec: TopologySpec, nodes: dict[str, NodeFacts],
                      allowlist: ClusterAllowlist = NO_ALLOWLIST) -> list[Problem]:
    out: list[Problem] = []
    _roles(spec, out)
    _names(spec, out)
    _nodes(spec, nodes, out)
    _spans(spec, out)
    _devices(spec, nodes, out)
    _tp(spec, out)
    _pd_sizes(spec, out)
    expert_parallel_rules(spec, out)
    if uses_npus(spec.launch_profile):
        fit_problems(spec, nodes, out)
    engine_owned(spec, out)
    engine_allowed(spec, out)
    simulation_rules(spec, out)
    pool_rules(spec, out)
    _services(spec, out)
    port_clashes(spec, nodes, out)
    mindie_rules(spec, nodes, out, allowlist)
    cpu_rules(spec, out)
    container_rules(spec, out, allowlist)
    return out


def _roles(spec: TopologySpec, out: list[Problem]) -> None:
    for role, example in (("prefill", "p0"), ("decode", "d0")):
        if not any(i.role == role for i in spec.instances):
            out.append(Problem("instances", f"no {role} instance: PD serving needs at least one prefill and one "
                               "decode instance", f"add an instance with role: {role} (e.g. name: {example})"))


def _names(spec: TopologySpec, out: list[Problem]) -> None:
    seen: set[str] = set()
    for inst in spec.instances:
        if inst.name in seen:
            out.append(Problem(instance_path(spec, inst, "name"), f"instance name {inst.name!r} is used twice",
                               f"rename it, e.g. {inst.name}-{spec.instances.index(inst)}"))
        seen.add(inst.name)


def _nodes(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    known = ", ".join(sorted(nodes)) or "none"
    npus = uses_npus(spec.launch_profile)
    npu_nodes = (", ".join(sorted(n for n, f in nodes.items() if f.npu_count)) or "none") if npus else known
    for inst in spec.instances:
        for k, name in enumerate(inst.span):
            node = nodes.get(name)
            path = instance_path(spec, inst, f"nodes[{k}]" if inst.nodes else "node")
            if node is None:
                out.append(Problem(path, f"{inst.name}: node {name!r} is not in the cluster inventory",
                                   f"use one of: {npu_nodes}"))
            elif npus and node.npu_count == 0:
                out.append(Problem(path, f"{inst.name}: node {name} has no NPUs", f"place it on an NPU node: {npu_nodes}"))
    others = [("proxy.node", spec.proxy.node)]
    if spec.kv_pool:
        others.append(("kv_pool.node", spec.kv_pool.node))
    if spec.store:
        others += [(f"store.servers[{i}].node", s.node) for i, s in enumerate(spec.store.servers)]
    if spec.bench_client:
        others.append(("bench_client.node", spec.bench_client.node))
    for path, name in others:
        if name not in nodes:
            out.append(Problem(path, f"node {name!r} is not in the cluster inventory", f"use one of: {known}"))


def _spans(spec: TopologySpec, out: list[Problem]) -> None:
    """An instance over n nodes puts dp / n ranks on each (launch_online_dp.py's --dp-size-local)."""
    for inst in spec.instances:
        n = len(inst.span)
        if n > 1 and inst.dp % n:
            fits = [d for d in range(n, n * inst.dp + 1, n) if d >= inst.dp][:1] or [n]
            out.append(Problem(instance_path(spec, inst, "dp"), f"{inst.name}: DP{inst.dp} over {n} nodes does not "
                               f"split evenly (each node hosts the same number of DP ranks)",
                               f"use DP={fits[0]} ({fits[0] // n} per node), or span a number of nodes that divides "
                               f"{inst.dp}"))


def _devices(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    if not uses_npus(spec.launch_profile):
        return  # no dies to assign (cpu_rules.py refuses a devices list)
    assigned = assign_devices(spec, nodes)
    for inst in spec.instances:
        for name in inst.span:
            node = nodes.get(name)
            if node is None or node.npu_count == 0:
                continue
            if inst.devices is None:
                if len(assigned[inst.name, name]) < inst.npus:
                    _short(spec, inst, node, nodes, assigned, out)
                continue
            _explicit_devices(spec, inst, node, assigned, out)


def _on(inst, node_name: str) -> bool:
    return node_name in inst.span


def _short(spec, inst, node, nodes, assigned, out) -> None:
    healthy = len(node.healthy_logical_ids)
    others = [i for i in spec.instances if _on(i, node.name) and i is not inst and assigned[i.name, node.name]]
    free = len(assigned[inst.name, node.name])
    taken = f", {healthy - free} taken by {', '.join(i.name for i in others)}" if others and free < healthy else ""
    span = len(inst.span)
    per_node = f"TP{inst.tp} x DP{inst.dp_local} (DP{inst.dp} over {span} nodes)" if span > 1 else \
        f"TP{inst.tp} x DP{inst.dp}"
    message = (f"{inst.name} on {node.name} needs {per_node} = {inst.npus} NPUs, "
               f"{node.name} has {healthy} healthy{taken}")
    options = []
    if inst.dp_local > 1 and free >= inst.tp:
        options.append(f"use DP={free // inst.tp * span}")
    tp = _largest_tp(free // inst.dp_local, spec.model.profile.attention_heads)
    if tp:
        options.append(f"TP={tp} x DP={inst.dp}")
    roomy = [n for n, f in sorted(nodes.items()) if n not in inst.span and f.npu_count
             and len(f.healthy_logical_ids) - sum(len(assigned[i.name, n]) for i in spec.instances if _on(i, n))
             >= inst.npus]
    if roomy:
        options.append(f"move it to {roomy[0]}")
    suggestion = ", or ".join(options) if options else f"move it to a node with {inst.npus} free healthy NPUs"
    out.append(Problem(instance_path(spec, inst, "dp" if inst.dp > 1 else "tp"), message, suggestion))


def _largest_tp(limit: int, heads: int) -> int:
    tp = 0
    t = 1
    while t <= limit:
        if heads % t == 0:
            tp = t
        t *= 2
    return tp


def _explicit_devices(spec, inst, node, assigned, out) -> None:
    path = instance_path(spec, inst, "devices")
    devices = inst.devices
    if len(devices) != inst.npus:
        sizes = f"TP{inst.tp} x DP{inst.dp_local}" + (" on each node" if len(inst.span) > 1 else "")
        out.append(Problem(path, f"{inst.name} lists {len(devices)} devices but {sizes} needs "
                           f"{inst.npus}", f"list exactly {inst.npus} ids, or set devices: null to take the first free"))
    dupes = sorted({d for d in devices if devices.count(d) > 1})
    if dupes:
        out.append(Problem(path, f"{inst.name} lists device {dupes[0]} more than once", "list each NPU id once"))
    bad = sorted(set(devices) - node.healthy_logical_ids)
    if bad:
        used = {d for i in spec.instances if _on(i, node.name) for d in assigned[i.name, node.name]}
        spare = sorted(node.healthy_logical_ids - used)[: len(bad)]
        hint = f"replace {bad} with free healthy ids {spare}" if spare else "move it to another node"
        out.append(Problem(path, f"{inst.name}: devices {bad} are not healthy NPUs of {node.name} "
                           f"(healthy: {_ids(node.healthy_logical_ids)})", hint))
    for other in spec.instances:
        if other is inst or not _on(other, node.name):
            continue
        if spec.instances.index(other) > spec.instances.index(inst) and other.devices is not None:
            continue  # report an explicit pair once, on the later instance
        overlap = sorted(set(devices) & set(assigned[other.name, node.name]))
        if overlap:
            out.append(Problem(path, f"{inst.name} and {other.name} on {node.name} both use NPUs {overlap}",
                               f"give {inst.name} other ids, or set devices: null to take the first free"))


def _ids(ids) -> str:
    ids = sorted(ids)
    if ids and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(map(str, ids)) or "none"


def _tp(spec: TopologySpec, out: list[Problem]) -> None:
    heads = spec.model.profile.attention_heads
    valid = [t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= heads and heads % t == 0]
    for inst in spec.instances:
        if inst.tp & (inst.tp - 1) or heads % inst.tp:
            near = min(valid, key=lambda t: (abs(t - inst.tp), -t)) if valid else 1
            out.append(Problem(instance_path(spec, inst, "tp"), f"{inst.name}: TP{inst.tp} must be a power of two that "
                               f"divides the model's {heads} attention heads",
                               f"use TP={near} (valid: {', '.join(map(str, valid))})"))


def _pd_sizes(spec: TopologySpec, out: list[Problem]) -> None:
    """kv_connector_extra_config carries ONE prefill {dp_size, tp_size} and ONE decode size, and D maps its TP
    ranks onto P's (P_tp >= D_tp, P_tp % D_tp == 0; docs/ascend-pd-launch-facts.md §1.4)."""
    for role in ("prefill", "decode"):
        group = [i for i in spec.instances if i.role == role]
        for inst in group[1:]:
            for field in ("tp", "dp"):
                if getattr(inst, field) != getattr(group[0], field):
                    first = getattr(group[0], field)
                    out.append(Problem(
                        instance_path(spec, inst, field),
                        f"{inst.name}: {field.upper()}{getattr(inst, field)} differs from {group[0].name}'s "
                        f"{field.upper()}{first}, but kv_connector_extra_config.{role}.{field}_size holds one value "
                        f"for all {role} instances",
                        f"give every {role} instance the same {field}: {first} on {inst.name}, or "
                        f"{getattr(inst, field)} on {group[0].name}"))
    prefills = [i for i in spec.instances if i.role == "prefill"]
    for d in (i for i in spec.instances if i.role == "decode"):
        for p in prefills:
            if p.tp < d.tp or p.tp % d.tp:
                divisors = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= p.tp and p.tp % t == 0]
                out.append(Problem(instance_path(spec, d, "tp"), f"{d.name}: decode TP{d.tp} must divide prefill "
                                   f"{p.name}'s TP{p.tp} (P TP >= D TP and P TP % D TP == 0)",
                                   f"use TP in {divisors} for {d.name}, or raise {p.name}'s TP"))
                break


def _services(spec: TopologySpec, out: list[Problem]) -> None:
    if spec.store and spec.store.replicas > len(spec.store.servers):
        n = len(spec.store.servers)
        out.append(Problem("store.replicas", f"{spec.store.replicas} replicas need as many servers, store has {n}",
                           f"set replicas to at most {n}, or add servers"))
    policy, key = spec.proxy.policy, spec.proxy.hash_key
    if policy == "consistent_hash" and key is None:
        out.append(Problem("proxy.hash_key", "consistent_hash needs a key to hash",
                           "set hash_key: request_id (or client_ip)"))
    if policy != "consistent_hash" and key is not None:
        out.append(Problem("proxy.hash_key", f"hash_key is only used by consistent_hash, policy is {policy}",
                           "remove hash_key, or set policy: consistent_hash"))
    if spec.proxy.kv_events is None:
        return
    if policy != "cache_aware":
        out.append(Problem("proxy.kv_events", f"kv_events feeds cache_aware's exact view, policy is {policy}",
                           "remove kv_events, or set policy: cache_aware"))
    for inst in spec.instances:
        if inst.role == "prefill" and "--no-enable-prefix-caching" in inst.extra_args:
            out.append(Problem(instance_path(spec, inst, "extra_args"), f"{inst.name} runs with "
                               "--no-enable-prefix-caching: its prefix cache stores no blocks, so it publishes no "
                               "KV cache events for proxy.kv_events",
                               "remove --no-enable-prefix-caching from its extra_args, or remove proxy.kv_events"))
