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

from dataclasses import dataclass

from .node_facts import NodeFacts
from .spec import InstanceSpec, TopologySpec

ADXL_BASE_ENV = "ASCEND_BASE_PORT"


@dataclass(frozen=True)
class EngineSlot:
    """One engine process of an instance: where it runs and which global DP ranks it hosts.

    External DP (launch_online_dp.py): one process per rank; node k of the span hosts ranks k*local ... and its
    processes listen on api_port + local index (7100-7115 on every node of a DP32 over two nodes).
    Internal DP: one process per node hosting its local ranks; only the first node serves the API, the others
    run --headless (docs/ascend-pd-launch-facts.md §1.1, §1.3).
    """

    node: str
    node_index: int  # position in the instance's span; 0 = the DP master
    ranks: tuple[int, ...]  # global DP ranks
    local_ranks: tuple[int, ...]  # their positions on the node (what slices the node's devices)
    api_port: int | None  # None: headless
    key: str


def engine_slots(inst: InstanceSpec) -> list[EngineSlot]:
    local, out = inst.dp_local, []
    for k, node in enumerate(inst.span):
        ranks = tuple(range(k * local, (k + 1) * local))
        if inst.dp_style == "internal":
            key = inst.name if k == 0 else f"{inst.name}-n{k}"
            out.append(EngineSlot(node, k, ranks, tuple(range(local)), inst.api_port if k == 0 else None, key))
        else:
            out += [EngineSlot(node, k, (r,), (j,), inst.api_port + j, f"{inst.name}-dp{r}")
                    for j, r in enumerate(ranks)]
    return out


def api_ports(inst: InstanceSpec, node: str | None = None) -> tuple[int, ...]:
    """HTTP API ports of the instance on one node (default: its first): api_port + local rank for each external
    DP rank, api_port alone for internal DP on the master node, none on a headless node."""
    node = node or inst.node
    return tuple(s.api_port for s in engine_slots(inst) if s.node == node and s.api_port is not None)


def kv_window(inst: InstanceSpec, ranks: tuple[int, ...] | None = None) -> range:
    """Side-channel ports of the given global DP ranks (contiguous), or of the whole instance (every node)."""
    ranks = ranks if ranks is not None else tuple(range(inst.dp))
    return range(inst.kv_port + min(ranks) * inst.tp, inst.kv_port + (max(ranks) + 1) * inst.tp)


def kv_events_ports(base: int, inst: InstanceSpec, node: str) -> range:
    """Ports the instance's DP ranks on one node publish KV cache events on (or answer replays on): base + global
    DP rank, as vLLM offsets a --kv-events-config endpoint per rank (docs/kv-events.md)."""
    ranks = [r for s in engine_slots(inst) if s.node == node for r in s.ranks]
    return range(base + min(ranks), base + max(ranks) + 1)


def uses_dp_rpc(inst: InstanceSpec) -> bool:
    # vLLM only coordinates a DP group (and binds the rpc port) when there is more than one rank.
    return inst.dp > 1


def adxl_range(spec: TopologySpec, inst: InstanceSpec, node: NodeFacts) -> range:
    """Ports Mooncake may bind at random on this instance's node."""
    base = spec.transfer_ports.base
    value = inst.env.get(ADXL_BASE_ENV)
    if isinstance(value, str) and value.isdecimal():
        base = int(value)
    return range(base, base + max(node.npu_count, 1) * spec.transfer_ports.per_device)


def show(ports: range) -> str:
    return str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"
