"""Which NPU dies each instance gets on each node it spans: explicit device lists first (the same ids on every
node), then `devices: null` takes the lowest free ids.

Shared by validation (to say what is short) and the profiles (to slice ASCEND_RT_VISIBLE_DEVICES), so both see
the same assignment.
"""

from __future__ import annotations

from .node_facts import NodeFacts
from .spec import TopologySpec

Assignment = dict[tuple[str, str], tuple[int, ...]]  # (instance name, node name) -> device ids


def assign_devices(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> Assignment:
    """An instance that cannot be served gets what was free (maybe fewer than it needs); validation reports that,
    rendering never sees it. A profile whose engines run on CPUs (vllm-cpu) gets no dies, so it claims none."""
    from .profiles import uses_npus  # the profiles import this module

    if not uses_npus(spec.launch_profile):
        return {(inst.name, node): () for inst in spec.instances for node in inst.span}
    taken: dict[str, set[int]] = {}
    out: Assignment = {}
    for inst in spec.instances:
        if inst.devices is not None:
            for node in inst.span:
                out[inst.name, node] = inst.devices
                taken.setdefault(node, set()).update(inst.devices)
    for inst in spec.instances:
        if inst.devices is None:
            for name in inst.span:
                node = nodes.get(name)
                healthy = sorted(node.healthy_logical_ids) if node else []
                used = taken.setdefault(name, set())
                free = [d for d in healthy if d not in used][: inst.npus]
                used.update(free)
                out[inst.name, name] = tuple(free)
    return out


def process_devices(devices: tuple[int, ...], tp: int, local_ranks: tuple[int, ...]) -> tuple[int, ...]:
    """The slice of an instance's devices on one node that the process hosting these local DP ranks sees
    (launch_online_dp.py: rank i gets devices[i*tp:(i+1)*tp])."""
    return devices[min(local_ranks) * tp:(max(local_ranks) + 1) * tp]
