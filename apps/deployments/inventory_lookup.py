"""What the topology code needs from the inventory, as plain values: NodeFacts per node, SshTarget per node.

Healthy NPU ids come from discovered Npu rows with health OK. A node with no discovered NPUs counts its
inventory npu_count as healthy ids 0..n-1 (decision: a fresh inventory can be planned before discovery; the
preflight job then reads npu-smi on the node and fails on any unhealthy or busy die the plan uses).
"""

from __future__ import annotations

from apps.inventory.choices import NpuHealth
from apps.inventory.models import Cluster, Node

from .topology import NodeFacts

SIM_PROFILE = "sim"


def cluster_nodes(cluster: Cluster) -> dict[str, Node]:
    """Nodes by name with their credential and NPUs loaded (three queries, whatever the size)."""
    nodes = Node.objects.filter(cluster=cluster).select_related("credential").prefetch_related("npus")
    return {n.name: n for n in nodes}


def node_facts(node: Node, *, launch_profile: str = "") -> NodeFacts:
    npus = list(node.npus.all())
    if npus:
        healthy = frozenset(n.logical_id for n in npus if n.health == NpuHealth.OK)
        count = max(node.npu_count, len(npus))
    else:
        healthy = frozenset(range(node.npu_count))
        count = node.npu_count
    nic = str((node.labels or {}).get("nic", "eth0")) or "eth0"
    return NodeFacts(name=node.name, address=node.address, healthy_logical_ids=healthy, npu_count=count,
                     nic_name=nic, is_sim=launch_profile == SIM_PROFILE)


def cluster_facts(cluster: Cluster, *, launch_profile: str = "") -> dict[str, NodeFacts]:
    return {name: node_facts(n, launch_profile=launch_profile) for name, n in cluster_nodes(cluster).items()}
