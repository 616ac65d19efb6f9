"""What the topology code needs from the inventory, as plain values: NodeFacts per node, SshTarget per node.

Healthy NPU ids come from discovered Npu rows with health OK. A node with no discovered NPUs counts its
inventory npu_count as healthy ids 0..n-1 (decision: a fresh inventory can be planned before discovery; the
preflight job then reads npu-smi on the node and fails on any unhealthy or busy die the plan uses).

A die's HBM (the fit check, docs/hbm-fit.md) is the smallest HBM total discovery read on the node's dies; before
discovery it follows the node's hardware model: Atlas A2 and A3 dies have 64 GB (65536 MB, what npu-smi prints).
"""

from __future__ import annotations

from apps.inventory.choices import NpuHealth
from apps.inventory.models import Cluster, Node

from .topology import ClusterAllowlist, NodeFacts

SIM_PROFILE = "sim"
# Hardware model words -> HBM per die in MB (docs/hbm-fit.md): Atlas 800I A3 (Ascend 910C, 2 dies of 64 GB per
# NPU) and A2 (Ascend 910B, 64 GB); simcluster's nodes say "A3" and "910B".
HARDWARE_DIE_HBM_MB = (("a3", 65536), ("a2", 65536), ("910c", 65536), ("910b", 65536))


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
    phy_ids = tuple(sorted((n.logical_id, n.phy_id) for n in npus if n.phy_id is not None))
    return NodeFacts(name=node.name, address=node.address, healthy_logical_ids=healthy, npu_count=count,
                     nic_name=nic, is_sim=launch_profile == SIM_PROFILE, die_hbm_mb=die_hbm_mb(node, npus),
                     phy_ids=phy_ids)


def die_hbm_mb(node: Node, npus: list) -> int | None:
    discovered = [n.hbm_total_mb for n in npus if n.hbm_total_mb]
    if discovered:
        return min(discovered)
    model = node.hardware_model.lower()
    return next((mb for word, mb in HARDWARE_DIE_HBM_MB if word in model), None)


def cluster_facts(cluster: Cluster, *, launch_profile: str = "") -> dict[str, NodeFacts]:
    return {name: node_facts(n, launch_profile=launch_profile) for name, n in cluster_nodes(cluster).items()}


def cluster_allowlist(cluster: Cluster) -> ClusterAllowlist:
    """What the cluster's admin lets a topology name (Cluster.allowlist, checked when it was stored)."""
    return ClusterAllowlist.from_data(cluster.allowlist)
