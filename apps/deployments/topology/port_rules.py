"""Port rules: every listener (API ports, DP rpc, the kv_port window, the pool, the store, the proxy and its admin
port) clear of every other on the same address, of port 65535, and of Mooncake's ADXL transfer ports."""

from __future__ import annotations

from dataclasses import dataclass

from . import ports
from .node_facts import NodeFacts
from .problem import Problem, instance_path
from .profiles import uses_npus
from .spec import TopologySpec


@dataclass(frozen=True)
class ListenerClaim:
    address: str
    node: str
    ports: range
    what: str
    path: str


def listener_claims(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> list[ListenerClaim]:
    """Every port range a listener of the spec takes, with its node, address and spec path (validation and
    apps/deployments/claims.py both check these)."""
    claims: list[ListenerClaim] = []

    def add(node_name: str, ports_: range, what: str, path: str) -> None:
        if node_name in nodes:
            claims.append(ListenerClaim(nodes[node_name].address, node_name, ports_, what, path))

    for inst in spec.instances:
        slots = ports.engine_slots(inst)
        for node in inst.span:
            api = ports.api_ports(inst, node)
            if api:
                add(node, range(api[0], api[-1] + 1), f"{inst.name} API port{'s' if len(api) > 1 else ''}",
                    instance_path(spec, inst, "api_port"))
            ranks = tuple(r for s in slots if s.node == node for r in s.ranks)
            add(node, ports.kv_window(inst, ranks), f"{inst.name} kv_port window", instance_path(spec, inst, "kv_port"))
        if ports.uses_dp_rpc(inst) and inst.dp_rpc_port:  # the DP master (first node) binds it
            add(inst.node, range(inst.dp_rpc_port, inst.dp_rpc_port + 1), f"{inst.name} DP rpc port",
                instance_path(spec, inst, "dp_rpc_port"))
    add(spec.proxy.node, range(spec.proxy.port, spec.proxy.port + 1), "proxy port", "proxy.port")
    if spec.kv_pool:
        pool = spec.kv_pool
        server = "mooncake_master" if pool.backend == "mooncake" else "MemCache MetaService"
        add(pool.node, range(pool.rpc_port, pool.rpc_port + 1), f"{server} rpc port", "kv_pool.rpc_port")
        add(pool.node, range(pool.metrics_port, pool.metrics_port + 1), f"{server} metrics port",
            "kv_pool.metrics_port")
        if pool.backend == "memcache":
            add(pool.node, range(pool.config_store_port, pool.config_store_port + 1), f"{server} config store port",
                "kv_pool.config_store_port")
    if spec.store:
        for i, s in enumerate(spec.store.servers):
            add(s.node, range(s.port, s.port + 1), f"memcached store server {i}", f"store.servers[{i}].port")
    # Last, so a clash is reported on admin_port (usually derived: port + 1). It binds 127.0.0.1 but is claimed on
    # the node like the rest: a wildcard listener there would take it too.
    add(spec.proxy.node, range(spec.proxy.admin_port, spec.proxy.admin_port + 1), "proxy admin port",
        "proxy.admin_port")
    events = spec.proxy.kv_events
    if events:  # every Prefill process binds tcp://*:port + its global DP rank (and the replay port likewise)
        for inst in (i for i in spec.instances if i.role == "prefill"):
            for node in inst.span:
                for base, what, field in ((events.port, "KV events", "port"),
                                          (events.replay_port, "KV events replay", "replay_port")):
                    if base:  # 0: a port the engine picks, nothing to plan
                        window = ports.kv_events_ports(base, inst, node)
                        add(node, window, f"{inst.name} {what} port{'s' if len(window) > 1 else ''}",
                            f"proxy.kv_events.{field}")
    return claims


def port_clashes(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    claims = listener_claims(spec, nodes)
    adxl: dict[str, tuple[range, str]] = {}
    for inst in spec.instances:
        for name in inst.span:
            node = nodes.get(name)
            if node and node.npu_count and uses_npus(spec.launch_profile):  # Mooncake's, on NPU nodes
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
        if clash is not None and clash.path == claim.path:  # one field for both: two Prefills' KV events on a node
            hint = (f"put {clash.what.split()[0]} and {claim.what.split()[0]} on different nodes (every Prefill "
                    "publishes on the same port + its DP rank), or remove proxy.kv_events")
        if reserved and reserved[0].start <= claim.ports.start < reserved[0].stop:
            hint += f" (at or above {reserved[0].stop}, clear of the ADXL range)"
        out.append(Problem(claim.path, message, hint))


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


def _free_start(claim: ListenerClaim, claims: list[ListenerClaim], reserved: range | None) -> int | None:
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
