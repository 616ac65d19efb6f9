"""What a launch profile is: something that turns a valid topology and node facts into a Plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..allowlist import NO_ALLOWLIST, ClusterAllowlist
from ..node_facts import NodeFacts
from ..plan import Plan
from ..spec import TopologySpec
from .engine_options import FlagRule


class LaunchProfile(Protocol):
    name: str
    # Engine flags / env the profile renders from spec fields, mapped to the field an operator sets instead;
    # validation rejects them in extra_args / env so a topology cannot contradict its own rendering.
    owned_flags: Mapping[str, str]
    owned_env: Mapping[str, str]
    # What an instance may add (engine_options.py): flags with the kind of value each takes, and env names.
    allowed_flags: Mapping[str, FlagRule]
    allowed_env: frozenset[str]
    # Whether its engines run on NPU dies: validation demands NPUs (and fits HBM), placement claims dies and
    # preflight reads npu-smi only then.
    uses_npus: bool
    # Seconds the deploy's health gate waits at least for its engines (the job's health_timeout when larger).
    min_health_timeout: int
    # Executables the plan runs that an install step puts on the nodes -> what to do when one is missing.
    install_hints: Mapping[str, str]
    # How its plan's processes are started, stopped and read: a key of apps/deployments/runtimes' RUNTIMES.
    runtime: str

    def render(self, spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> Plan:
        """Assumes validate_topology(spec, nodes, allowlist) returned no problems."""
        ...

    def required_files(self, spec: TopologySpec) -> Mapping[str, str]:
        """Files every engine node must hold (path -> the problem when it does not), checked by preflight."""
        ...
