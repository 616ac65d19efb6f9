"""Where the simulated Kubernetes puts pods: hostNetwork, so a pod's IP is its node's address.

P/D server pods go onto nodes of the hardware user_config names (800I_A3 -> A3, 800I_A2 -> 910B), first fit in
the cluster's node order; a pod needs its p_pod_npu_num / d_pod_npu_num free dies (dies held by running pods of
any namespace, or by any engine registered on the node, are taken). None fits: the pod stays Pending. Controller
and coordinator go onto the first node without NPUs (else the deploy host).
Each server pod gets a slot, the lowest one no running pod on its node holds: its ports derive from it. Slot 0
(port 1025) is never given on a node that runs a coordinator, whose predict port is 1025 by default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from simcluster import nodestate
from simcluster.mindie import kube
from simcluster.spec import HARDWARE

SERVER_PORT_BASE = 1025  # MindIE Server's port; pod predict port = 1025 + 100 x slot (OpenAI API, /health, /metrics)
SERVER_PORT_STEP = 100
KV_PORT_BASE = 20000  # MooncakeConnectorV1 side channel = 20000 + 1000 x slot (+ dp_rank x tp + 0..tp-1)


def server_port(slot: int) -> int:
    return SERVER_PORT_BASE + SERVER_PORT_STEP * slot


def kv_port(slot: int) -> int:
    return KV_PORT_BASE + 1000 * slot


@dataclass
class Node:
    name: str
    address: str
    hardware: str
    dies: int
    dir: Path
    used: set[int] = field(default_factory=set)
    slots: set[int] = field(default_factory=set)

    def take(self, count: int) -> list[int] | None:
        free = [d for d in range(self.dies) if d not in self.used]
        if len(free) < count:
            return None
        self.used.update(free[:count])
        return free[:count]

    def take_slot(self) -> int:
        slot = next(s for s in range(len(self.slots) + 1) if s not in self.slots)
        self.slots.add(slot)
        return slot


def cluster_nodes(state_dir: Path) -> list[Node]:
    """The cluster's nodes in spec order, with the dies and slots running pods and engines hold."""
    state = json.loads((Path(state_dir) / "state.json").read_text())
    nodes = []
    for spec_node in state["spec"]["nodes"]:
        dies = HARDWARE[spec_node.get("hardware", "")][2]
        ndir = Path(state_dir) / "nodes" / spec_node["name"]
        node = Node(spec_node["name"], spec_node["address"], spec_node.get("hardware", ""), dies, ndir)
        for engine in nodestate.running_engines(ndir):
            node.used.update(engine.get("devices") or [])
        nodes.append(node)
    by_name = {n.name: n for n in nodes}
    for namespace in kube.namespaces(state_dir):
        for pod in (kube.load_namespace(state_dir, namespace) or {}).get("pods", []):
            node = by_name.get(pod.get("node"))
            if node is None or not kube.pod_running(pod):
                continue
            node.used.update(pod.get("devices") or [])
            if pod.get("slot") is not None:
                node.slots.add(pod["slot"])
            if pod.get("role") == "coordinator":
                node.slots.add(0)
    return nodes


def place_server(nodes: list[Node], hardware: str, npus: int) -> tuple[Node, list[int]] | None:
    for node in nodes:
        if node.hardware == hardware:
            dies = node.take(npus)
            if dies is not None:
                return node, dies
    return None


def control_node(nodes: list[Node], deploy_host: str | None) -> Node:
    for node in nodes:
        if node.dies == 0:
            return node
    return next((n for n in nodes if n.name == deploy_host), nodes[0])


def why_pending(nodes: list[Node], hardware: str, npus: int) -> str:
    """The scheduler's FailedScheduling message."""
    wrong = sum(1 for n in nodes if n.hardware != hardware)
    short = len(nodes) - wrong
    parts = []
    if short:
        parts.append(f"{short} Insufficient huawei.com/Ascend910")
    if wrong:
        parts.append(f"{wrong} node(s) didn't match Pod's node affinity/selector")
    return f"0/{len(nodes)} nodes are available: {', '.join(parts)} (need {npus} NPUs of {hardware} hardware)."
