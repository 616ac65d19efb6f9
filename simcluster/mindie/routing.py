"""Which P and which D serve a request: MindIE's pd_separate coordinator picks a P instance and a D instance; here
the one with the fewest outstanding requests (ties: the fewer served so far, then the lower index), and within it
the pod with the fewest. A multi-pod instance is its pods."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ServerPod:
    name: str
    url: str | None  # None: the pod is Pending
    outstanding: int = 0
    served: int = 0
    healthy: bool = False


@dataclass
class Instance:
    role: str
    index: int
    pods: list[ServerPod] = field(default_factory=list)

    @property
    def outstanding(self) -> int:
        return sum(p.outstanding for p in self.pods)

    @property
    def served(self) -> int:
        return sum(p.served for p in self.pods)

    def usable(self) -> list[ServerPod]:
        return [p for p in self.pods if p.healthy]


class NoInstance(RuntimeError):
    pass


def instances_from_plan(plan: dict) -> list[Instance]:
    return [Instance(i["role"], i["instance"], [ServerPod(p["name"], p["url"]) for p in i["pods"]])
            for i in plan["instances"]]


def pick(instances: list[Instance], role: str) -> tuple[Instance, ServerPod]:
    candidates = [i for i in instances if i.role == role and i.usable()]
    if not candidates:
        raise NoInstance(f"no healthy {role} instance")
    chosen = min(candidates, key=lambda i: (i.outstanding, i.served, i.index))
    pod = min(chosen.usable(), key=lambda p: (p.outstanding, p.served))
    return chosen, pod
