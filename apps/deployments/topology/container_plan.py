"""runtime: container: the part of a plan that says how its engines run in containers (plan.ContainerPlan): the
pinned image, the admin's mounts the topology named, and each engine's dies as device numbers. Only the P/D engines
run in containers, as vllm-ascend's guides run `vllm serve` inside its image (docs/container-launch-facts.md §1.3);
the KV pool's master and our proxy (pdproxy, which the image does not hold) stay host processes (docs/containers.md)."""

from __future__ import annotations

from .allowlist import ClusterAllowlist
from .node_facts import NodeFacts
from .plan import ContainerPlan, Plan
from .spec import TopologySpec

ENGINE_ROLES = ("prefill", "decode")


def container_plan(spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist,
                   plan: Plan) -> ContainerPlan:
    """Assumes container_rules found no problem (the image and every mount are on the allowlist)."""
    c = spec.container
    entry = allowlist.image(c.image)
    digest = c.digest or (entry.digest if entry else "")
    dies = tuple((p.key, engine_dies(p.launch.env.get("ASCEND_RT_VISIBLE_DEVICES", ""), nodes[p.node]))
                 for p in plan.processes if p.role in ENGINE_ROLES)
    return ContainerPlan(engine=c.engine, image=f"{c.image}@{digest}" if digest else c.image, shm_size=c.shm_size,
                         mounts=tuple(allowlist.mount(name) for name in c.mounts), dies=dies)


def engine_dies(visible: str, node: NodeFacts) -> tuple[int, ...]:
    """The phy ids of exactly the dies the host runtime would hand the process: its ASCEND_RT_VISIBLE_DEVICES (the
    placement's logical ids, topology/placement.py), each mapped to the /dev/davinci<N> number of that die."""
    return tuple(node.phy_id(int(d)) for d in visible.split(",") if d)
