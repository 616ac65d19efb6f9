"""How a deployment's planned processes run: started, stopped, found, read, their logs tailed and their files placed
(base.py says what a runtime is). A launch profile names its runtime, a topology's `runtime: container` overrides
it; runtime_for finds it."""

from __future__ import annotations

from ..topology import Plan, TopologySpec, get_profile
from .base import Runtime
from .container import ContainerRuntime
from .container_command import (
    plan_start_lines,  # the lines a plan's processes start with that are not the host's
)
from .host import HostRuntime
from .mindie_k8s import MindieK8sRuntime

RUNTIMES: dict[str, Runtime] = {"host": HostRuntime(), "mindie-k8s": MindieK8sRuntime(),
                                "container": ContainerRuntime()}


def runtime_for(plan: Plan | None, spec: TopologySpec | None = None) -> Runtime:
    """`container` when the topology says `runtime: container` (its plan then has a container part), else the
    runtime of the plan's launch profile. Without a plan (stop and refresh act on a revision that no longer
    validates) the spec still tells containers; other recorded processes are found by their pid files, as the host
    runtime finds them."""
    if (spec is not None and spec.runtime == "container") or getattr(plan, "container", None) is not None:
        return RUNTIMES["container"]
    if plan is None:
        return RUNTIMES["host"]
    return RUNTIMES[get_profile(plan.profile).runtime]


__all__ = ["RUNTIMES", "ContainerRuntime", "HostRuntime", "MindieK8sRuntime", "Runtime", "plan_start_lines",
           "runtime_for"]
