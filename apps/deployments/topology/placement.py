"""Which NPU dies each instance gets: explicit device lists first, then `devices: null` takes the lowest free ids.

Shared by validation (to say what is short) and the profiles (to slice ASCEND_RT_VISIBLE_DEVICES), so both see
the same assignment.
"""

from __future__ import annotations

from .node_facts import NodeFacts
from .spec import TopologySpec


def assign_devices(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> dict[str, tuple[int, ...]]:
    """Instance name -> device ids. An instance that cannot be served gets what was free (maybe fewer than it
    needs); validation reports that, rendering never sees it."""
    taken: dict[str, set[int]] = {}
    out: dict[str, tuple[int, ...]] = {}
    for inst in spec.instances:
        if inst.devices is not None:
            out[inst.name] = inst.devices
            taken.setdefault(inst.node, set()).update(inst.devices)
    for inst in spec.instances:
        if inst.devices is None:
            node = nodes.get(inst.node)
            healthy = sorted(node.healthy_logical_ids) if node else []
            used = taken.setdefault(inst.node, set())
            free = [d for d in healthy if d not in used][: inst.npus]
            used.update(free)
            out[inst.name] = tuple(free)
    return out


def process_devices(devices: tuple[int, ...], tp: int, ranks: tuple[int, ...]) -> tuple[int, ...]:
    """The slice of an instance's devices that the process hosting these local DP ranks sees
    (launch_online_dp.py: rank i gets devices[i*tp:(i+1)*tp])."""
    return devices[min(ranks) * tp:(max(ranks) + 1) * tp]
