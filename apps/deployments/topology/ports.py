"""Port arithmetic for P/D instances in one place, so validation checks exactly what the profiles render.

kv_port (docs/ascend-pd-launch-facts.md §1.5) is not an HTTP port: every worker (one per NPU die) binds a ZMQ side channel
on kv_port + global_dp_rank * TP + tp_rank (PP = PCP = 1 here). An instance therefore owns
[kv_port, kv_port + DP * TP); in external DP, rank r's process owns [kv_port + r*TP, kv_port + (r+1)*TP).

Mooncake's ADXL transfer ports are bound at random from base + die * per_device (TransferPortsSpec): with
v0.3.9+ (per_device 100) a 16-die node uses 20000-21599, so the reference's kv_port 30000/30200 is clear. We
decided against a warning for v0.3.7.post2 windows (per_device 1000, up to 35999): the Mooncake version is a
spec field (transfer_ports.per_device), so such a cluster gets a hard error instead of noise on every other.
"""

from __future__ import annotations

from .node_facts import NodeFacts
from .spec import InstanceSpec, TopologySpec

ADXL_BASE_ENV = "ASCEND_BASE_PORT"


def dp_ranks_per_process(inst: InstanceSpec) -> list[tuple[int, ...]]:
    """The global DP ranks each process hosts: one rank per process (external) or all of them (internal)."""
    if inst.dp_style == "internal":
        return [tuple(range(inst.dp))]
    return [(r,) for r in range(inst.dp)]


def api_ports(inst: InstanceSpec) -> tuple[int, ...]:
    """HTTP API ports of the instance: api_port + rank for each external DP rank, api_port alone for internal."""
    return tuple(inst.api_port + i for i in range(len(dp_ranks_per_process(inst))))


def kv_window(inst: InstanceSpec, ranks: tuple[int, ...] | None = None) -> range:
    """Side-channel ports of the given DP ranks (contiguous), or of the whole instance."""
    ranks = ranks if ranks is not None else tuple(range(inst.dp))
    return range(inst.kv_port + min(ranks) * inst.tp, inst.kv_port + (max(ranks) + 1) * inst.tp)


def uses_dp_rpc(inst: InstanceSpec) -> bool:
    # vLLM only coordinates a DP group (and binds the rpc port) when there is more than one rank.
    return inst.dp > 1


def adxl_range(spec: TopologySpec, inst: InstanceSpec, node: NodeFacts) -> range:
    """Ports Mooncake may bind at random on this instance's node."""
    base = spec.transfer_ports.base
    if inst.env.get(ADXL_BASE_ENV, "").isdecimal():
        base = int(inst.env[ADXL_BASE_ENV])
    return range(base, base + max(node.npu_count, 1) * spec.transfer_ports.per_device)


def show(ports: range) -> str:
    return str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"
