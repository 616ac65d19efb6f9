"""Rules a topology must pass against an inventory, each Problem naming the field and a concrete fix.

Run when a revision is saved and again right before a job runs (NPU health changes in between).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import ports
from .node_facts import NodeFacts
from .placement import assign_devices
from .profiles import get_profile
from .profiles.engine_options import REMOTE_CODE_FLAG
from .spec import InstanceSpec, TopologySpec


@dataclass(frozen=True)
class Problem:
    path: str  # field path in the spec, e.g. "instances[0].dp"
    message: str
    suggestion: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}. Fix: {self.suggestion}"


def validate_topology(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> list[Problem]:
    out: list[Problem] = []
    _roles(spec, out)
    _names(spec, out)
    _nodes(spec, nodes, out)
    _devices(spec, nodes, out)
    _tp(spec, out)
    _pd_sizes(spec, out)
    _engine_owned(spec, out)
    _engine_allowed(spec, out)
    _services(spec, out)
    _ports(spec, nodes, out)
    return out


def _ipath(spec: TopologySpec, inst: InstanceSpec, field: str) -> str:
    return f"instances[{spec.instances.index(inst)}].{field}"


def _roles(spec: TopologySpec, out: list[Problem]) -> None:
    for role, example in (("prefill", "p0"), ("decode", "d0")):
        if not any(i.role == role for i in spec.instances):
            out.append(Problem("instances", f"no {role} instance: PD serving needs at least one prefill and one "
                               "decode instance", f"add an instance with role: {role} (e.g. name: {example})"))


def _names(spec: TopologySpec, out: list[Problem]) -> None:
    seen: set[str] = set()
    for inst in spec.instances:
        if inst.name in seen:
            out.append(Problem(_ipath(spec, inst, "name"), f"instance name {inst.name!r} is used twice",
                               f"rename it, e.g. {inst.name}-{spec.instances.index(inst)}"))
        seen.add(inst.name)


def _nodes(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    known = ", ".join(sorted(nodes)) or "none"
    npu_nodes = ", ".join(sorted(n for n, f in nodes.items() if f.npu_count)) or "none"
    for inst in spec.instances:
        node = nodes.get(inst.node)
        if node is None:
            out.append(Problem(_ipath(spec, inst, "node"), f"{inst.name}: node {inst.node!r} is not in the "
                               "cluster inventory", f"use one of: {npu_nodes}"))
        elif node.npu_count == 0:
            out.append(Problem(_ipath(spec, inst, "node"), f"{inst.name}: node {inst.node} has no NPUs",
                               f"place it on an NPU node: {npu_nodes}"))
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


def _devices(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    assigned = assign_devices(spec, nodes)
    for inst in spec.instances:
        node = nodes.get(inst.node)
        if node is None or node.npu_count == 0:
            continue
        if inst.devices is None:
            if len(assigned[inst.name]) < inst.npus:
                _short(spec, inst, node, nodes, assigned, out)
            continue
        _explicit_devices(spec, inst, node, assigned, out)


def _short(spec, inst, node, nodes, assigned, out) -> None:
    healthy = len(node.healthy_logical_ids)
    others = [i for i in spec.instances if i.node == inst.node and i is not inst and assigned[i.name]]
    free = len(assigned[inst.name])
    taken = f", {healthy - free} taken by {', '.join(i.name for i in others)}" if others and free < healthy else ""
    message = (f"{inst.name} on {node.name} needs TP{inst.tp} x DP{inst.dp} = {inst.npus} NPUs, "
               f"{node.name} has {healthy} healthy{taken}")
    options = []
    if inst.dp > 1 and free >= inst.tp:
        options.append(f"use DP={free // inst.tp}")
    tp = _largest_tp(free // inst.dp, spec.model.profile.attention_heads)
    if tp:
        options.append(f"TP={tp} x DP={inst.dp}")
    roomy = [n for n, f in sorted(nodes.items()) if n != inst.node and f.npu_count
             and len(f.healthy_logical_ids) - sum(len(assigned[i.name]) for i in spec.instances if i.node == n)
             >= inst.npus]
    if roomy:
        options.append(f"move it to {roomy[0]}")
    suggestion = ", or ".join(options) if options else f"move it to a node with {inst.npus} free healthy NPUs"
    out.append(Problem(_ipath(spec, inst, "dp" if inst.dp > 1 else "tp"), message, suggestion))


def _largest_tp(limit: int, heads: int) -> int:
    tp = 0
    t = 1
    while t <= limit:
        if heads % t == 0:
            tp = t
        t *= 2
    return tp


def _explicit_devices(spec, inst, node, assigned, out) -> None:
    path = _ipath(spec, inst, "devices")
    devices = inst.devices
    if len(devices) != inst.npus:
        out.append(Problem(path, f"{inst.name} lists {len(devices)} devices but TP{inst.tp} x DP{inst.dp} needs "
                           f"{inst.npus}", f"list exactly {inst.npus} ids, or set devices: null to take the first free"))
    dupes = sorted({d for d in devices if devices.count(d) > 1})
    if dupes:
        out.append(Problem(path, f"{inst.name} lists device {dupes[0]} more than once", "list each NPU id once"))
    bad = sorted(set(devices) - node.healthy_logical_ids)
    if bad:
        used = {d for i in spec.instances if i.node == inst.node for d in assigned[i.name]}
        spare = sorted(node.healthy_logical_ids - used)[: len(bad)]
        hint = f"replace {bad} with free healthy ids {spare}" if spare else "move it to another node"
        out.append(Problem(path, f"{inst.name}: devices {bad} are not healthy NPUs of {node.name} "
                           f"(healthy: {_ids(node.healthy_logical_ids)})", hint))
    for other in spec.instances:
        if other is inst or other.node != inst.node:
            continue
        if spec.instances.index(other) > spec.instances.index(inst) and other.devices is not None:
            continue  # report an explicit pair once, on the later instance
        overlap = sorted(set(devices) & set(assigned[other.name]))
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
            out.append(Problem(_ipath(spec, inst, "tp"), f"{inst.name}: TP{inst.tp} must be a power of two that "
                               f"divides the model's {heads} attention heads",
                               f"use TP={near} (valid: {', '.join(map(str, valid))})"))


def _pd_sizes(spec: TopologySpec, out: list[Problem]) -> None:
    """kv_connector_extra_config carries ONE prefill {dp_size, tp_size} and ONE decode size, and D maps its TP
    ranks onto P's (P_tp >= D_tp, P_tp % D_tp == 0; docs/launch-reference.md §1.4)."""
    for role in ("prefill", "decode"):
        group = [i for i in spec.instances if i.role == role]
        for inst in group[1:]:
            for field in ("tp", "dp"):
                if getattr(inst, field) != getattr(group[0], field):
                    first = getattr(group[0], field)
                    out.append(Problem(
                        _ipath(spec, inst, field),
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
                out.append(Problem(_ipath(spec, d, "tp"), f"{d.name}: decode TP{d.tp} must divide prefill "
                                   f"{p.name}'s TP{p.tp} (P TP >= D TP and P TP % D TP == 0)",
                                   f"use TP in {divisors} for {d.name}, or raise {p.name}'s TP"))
                break


def _owned_flag(token: str, owned_flags: Mapping[str, str]) -> str | None:
    """The owned flag `token` would set: itself, or one it abbreviates (argparse accepts unique prefixes)."""
    if not token.startswith("--"):
        return None
    name = token.split("=", 1)[0]
    if name in owned_flags:
        return name
    if len(name) > 3:
        return next((flag for flag in owned_flags if flag.startswith(name)), None)
    return None


def _engine_owned(spec: TopologySpec, out: list[Problem]) -> None:
    """Flags and env the profile derives from spec fields (kv_role from role, sizes from tp/dp, devices...)
    cannot be overridden, so kv_producer/kv_consumer and the extra_config sizes always match the instances."""
    profile = get_profile(spec.launch_profile)
    for inst in spec.instances:
        for k, token in enumerate(inst.extra_args):
            owned = _owned_flag(token, profile.owned_flags)
            if owned:
                out.append(Problem(_ipath(spec, inst, f"extra_args[{k}]"), f"{inst.name}: {token} is rendered "
                                   "from the topology", f"remove it and set {profile.owned_flags[owned]}"))
        for name in inst.env:
            if name in profile.owned_env:
                out.append(Problem(_ipath(spec, inst, f"env.{name}"), f"{inst.name}: {name} is rendered from "
                                   "the topology", f"remove it and set {profile.owned_env[name]}"))
        if inst.dp > 1 and inst.dp_rpc_port is None:
            out.append(Problem(_ipath(spec, inst, "dp_rpc_port"), f"{inst.name}: DP{inst.dp} needs a DP rpc port "
                               "for its ranks to meet", "set dp_rpc_port, e.g. 12321"))


def _engine_allowed(spec: TopologySpec, out: list[Problem]) -> None:
    """An operator chooses among the profile's flags and env names (profiles/engine_options.py), so nothing an
    instance sets can make a node run another program or load other code. Owned ones are reported above."""
    profile = get_profile(spec.launch_profile)
    flags = ", ".join(sorted(profile.allowed_flags))
    for inst in spec.instances:
        args = inst.extra_args
        for k, token in enumerate(args):
            if not token.startswith("--") or _owned_flag(token, profile.owned_flags):
                continue
            value = args[k + 1] if k + 1 < len(args) and not args[k + 1].startswith("--") else None
            rule = profile.allowed_flags.get(token)
            if rule is None:
                out.append(Problem(_ipath(spec, inst, f"extra_args[{k}]"), f"{inst.name}: {token} is not an engine "
                                   f"flag the {profile.name} profile allows", f"remove it; allowed: {flags}"))
                continue
            problem = rule.value_problem(token, value)
            if problem:
                where = f"extra_args[{k + 1}]" if value is not None else f"extra_args[{k}]"
                fix = "add" if value is None else "remove" if rule.kind == "switch" else "change"
                out.append(Problem(_ipath(spec, inst, where), f"{inst.name}: {problem}", f"{fix} the value after {token}"))
            if token == REMOTE_CODE_FLAG and not spec.model.path.startswith("/"):
                out.append(Problem(_ipath(spec, inst, f"extra_args[{k}]"), f"{inst.name}: {token} runs Python "
                                   f"shipped with the model, and model.path {spec.model.path!r} is not a directory "
                                   "on the nodes (a hub id would be fetched and its code run)",
                                   "put the weights on the nodes and set model.path to their absolute path, or "
                                   f"remove {token}"))
        allowed_env = ", ".join(sorted(profile.allowed_env))
        for name in inst.env:
            if name not in profile.owned_env and name not in profile.allowed_env:
                out.append(Problem(_ipath(spec, inst, f"env.{name}"), f"{inst.name}: env {name} is not one the "
                                   f"{profile.name} profile lets an instance set", f"remove it; allowed: {allowed_env}"))


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


@dataclass(frozen=True)
class _Claim:
    address: str
    node: str
    ports: range
    what: str
    path: str


def _claims(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> list[_Claim]:
    claims: list[_Claim] = []

    def add(node_name: str, ports_: range, what: str, path: str) -> None:
        if node_name in nodes:
            claims.append(_Claim(nodes[node_name].address, node_name, ports_, what, path))

    for inst in spec.instances:
        api = ports.api_ports(inst)
        add(inst.node, range(api[0], api[-1] + 1), f"{inst.name} API port{'s' if len(api) > 1 else ''}",
            _ipath(spec, inst, "api_port"))
        if ports.uses_dp_rpc(inst) and inst.dp_rpc_port:
            add(inst.node, range(inst.dp_rpc_port, inst.dp_rpc_port + 1), f"{inst.name} DP rpc port",
                _ipath(spec, inst, "dp_rpc_port"))
        add(inst.node, ports.kv_window(inst), f"{inst.name} kv_port window", _ipath(spec, inst, "kv_port"))
    add(spec.proxy.node, range(spec.proxy.port, spec.proxy.port + 1), "proxy port", "proxy.port")
    if spec.kv_pool:
        pool = spec.kv_pool
        add(pool.node, range(pool.rpc_port, pool.rpc_port + 1), "mooncake_master rpc port", "kv_pool.rpc_port")
        add(pool.node, range(pool.metrics_port, pool.metrics_port + 1), "mooncake_master metrics port",
            "kv_pool.metrics_port")
    if spec.store:
        for i, s in enumerate(spec.store.servers):
            add(s.node, range(s.port, s.port + 1), f"memcached store server {i}", f"store.servers[{i}].port")
    # Last, so a clash is reported on admin_port (usually derived: port + 1). It binds 127.0.0.1 but is claimed on
    # the node like the rest: a wildcard listener there would take it too.
    add(spec.proxy.node, range(spec.proxy.admin_port, spec.proxy.admin_port + 1), "proxy admin port",
        "proxy.admin_port")
    return claims


def _ports(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    claims = _claims(spec, nodes)
    adxl: dict[str, tuple[range, str]] = {}
    for inst in spec.instances:
        node = nodes.get(inst.node)
        if node and node.npu_count:
            r = ports.adxl_range(spec, inst, node)
            adxl[node.address] = (r, f"Mooncake's ADXL transfer ports {ports.show(r)} "
                                     f"({r.start} + {node.npu_count} dies x {spec.transfer_ports.per_device})")
    for k, claim in enumerate(claims):
        field = claim.path.rsplit(".", 1)[1]
        if claim.ports.stop - 1 > 65535:
            out.append(Problem(claim.path, f"{claim.what} {ports.show(claim.ports)} runs past port 65535",
                               f"set {field} to at most {65536 - len(claim.ports)}"))
            continue
        clash = next((c for c in claims[:k] if c.address == claim.address and _overlap(c.ports, claim.ports)), None)
        reserved = adxl.get(claim.address)
        if clash is not None:
            message = (f"{claim.what} {ports.show(claim.ports)} on {claim.node} ({claim.address}) collides with "
                       f"{clash.what} {ports.show(clash.ports)}")
        elif reserved and _overlap(reserved[0], claim.ports):
            message = f"{claim.what} {ports.show(claim.ports)} on {claim.node} overlaps {reserved[1]}"
        else:
            continue
        free = _free_start(claim, claims, reserved[0] if reserved else None)
        hint = f"set {field} to {free}" if free else "pick a port range that nothing else on this node uses"
        if reserved and reserved[0].start <= claim.ports.start < reserved[0].stop:
            hint += f" (at or above {reserved[0].stop}, clear of the ADXL range)"
        out.append(Problem(claim.path, message, hint))


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


def _free_start(claim: _Claim, claims: list[_Claim], reserved: range | None) -> int | None:
    """First start >= the wanted one whose whole range is clear of every other claim on the address."""
    size = len(claim.ports)
    busy = [c.ports for c in claims if c.address == claim.address and c is not claim]
    busy += [reserved] if reserved else []
    start = claim.ports.start
    while start + size - 1 <= 65535:
        candidate = range(start, start + size)
        hit = next((b for b in busy if _overlap(b, candidate)), None)
        if hit is None:
            return start
        start = hit.stop
    return None
