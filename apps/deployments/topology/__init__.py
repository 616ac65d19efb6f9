"""PD topology core (no Django): typed spec, validation against node facts, launch profiles that render plans.

    spec = spec_from_yaml(text)                       # SpecError(errors=[(path, message), ...]) on bad input
    problems = validate_topology(spec, nodes)         # nodes: dict[str, NodeFacts]
    plan = build_plan(spec, nodes)                    # TopologyInvalid(problems) unless clean
    print(plan_to_text(plan))
"""

from __future__ import annotations

import dataclasses

from sshexec import LaunchSpec, detached_start_command

from .allowlist import NO_ALLOWLIST, AllowedImage, AllowedMount, ClusterAllowlist
from .container_plan import container_plan
from .hbm_fit import DieFit, fit_estimates
from .node_facts import NodeFacts
from .parse import normal_run_dir, spec_from_dict
from .plan import ContainerPlan, Plan, PlannedProcess, Stage, plan_to_text
from .profiles import LaunchProfile, get_profile
from .run_files import admin_header_path, admin_token_path
from .serialize import spec_diff, spec_from_yaml, spec_to_dict, spec_to_yaml
from .spec import (
    BenchClientSpec,
    ContainerSpec,
    InstanceSpec,
    KvPoolSpec,
    ModelProfile,
    ModelSpec,
    ProxySpec,
    SpecError,
    StoreServer,
    StoreSpec,
    TopologySpec,
    TransferPortsSpec,
)
from .validation import Problem, validate_topology


class TopologyInvalid(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


def build_plan(spec: TopologySpec, nodes: dict[str, NodeFacts], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> Plan:
    """Validate, then render with the spec's launch profile; never renders an invalid topology. `allowlist`: what the
    cluster's admin lets a topology name (images, host directories)."""
    problems = validate_topology(spec, nodes, allowlist)
    if problems:
        raise TopologyInvalid(problems)
    plan = get_profile(spec.launch_profile).render(spec, nodes, allowlist)
    if spec.runtime == "container":
        plan = dataclasses.replace(plan, container=container_plan(spec, nodes, allowlist, plan))
    return dataclasses.replace(plan, hbm=fit_estimates(spec, nodes))


__all__ = [
    "NO_ALLOWLIST", "AllowedImage", "AllowedMount", "BenchClientSpec", "ClusterAllowlist", "ContainerPlan", "DieFit", "InstanceSpec", "KvPoolSpec", "LaunchProfile", "LaunchSpec", "ModelProfile", "ModelSpec",
    "NodeFacts", "Plan", "PlannedProcess", "Problem", "ProxySpec", "SpecError", "Stage", "StoreServer",
    "StoreSpec", "TopologyInvalid", "TopologySpec", "TransferPortsSpec", "admin_header_path", "admin_token_path",
    "ContainerSpec", "build_plan", "detached_start_command", "fit_estimates", "get_profile", "normal_run_dir", "plan_to_text", "spec_diff",
    "spec_from_dict", "spec_from_yaml", "spec_to_dict", "spec_to_yaml", "validate_topology",
]
