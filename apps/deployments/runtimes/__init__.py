"""How a deployment's planned processes run: started, stopped, found, read, their logs tailed and their files placed
(base.py says what a runtime is). A launch profile names its runtime; runtime_for finds it."""

from __future__ import annotations

from ..topology import Plan, get_profile
from .base import Runtime
from .host import HostRuntime
from .mindie_k8s import MindieK8sRuntime

RUNTIMES: dict[str, Runtime] = {"host": HostRuntime(), "mindie-k8s": MindieK8sRuntime()}


def runtime_for(plan: Plan | None) -> Runtime:
    """The runtime of the plan's launch profile. Without a plan (stop and refresh act on a revision that no longer
    validates) the recorded processes are found by their pid files, as the host runtime finds them."""
    if plan is None:
        return RUNTIMES["host"]
    return RUNTIMES[get_profile(plan.profile).runtime]


__all__ = ["RUNTIMES", "HostRuntime", "MindieK8sRuntime", "Runtime", "runtime_for"]
