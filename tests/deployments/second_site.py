"""A second deployment beside the first on one cluster: it may not hold the NPU dies and ports the first holds
(apps/deployments/claims.py), so tests move its topology to nodes of its own."""

from __future__ import annotations

import re


def on_new_nodes(cluster, yaml_text: str, k: int = 1) -> str:
    """yaml_text (a topology on the reference's node0-node3 and proxy) moved to a k-th set of nodes added to the
    cluster now: node{4k}-node{4k+3} (16 dies each) and proxy{k}."""
    from apps.inventory.models import Node

    model = Node.objects.filter(cluster=cluster).first()
    for i, (name, npus) in enumerate([*((f"node{4 * k + n}", 16) for n in range(4)), (f"proxy{k}", 0)]):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.{20 + k}.{i + 1}",
                            credential=model.credential, host_key=model.host_key, npu_count=npus)
    moved = re.sub(r"node: node([0-3])\b", lambda m: f"node: node{4 * k + int(m.group(1))}", yaml_text)
    return moved.replace("node: proxy", f"node: proxy{k}")
