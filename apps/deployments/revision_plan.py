"""The plan a job runs and the operator reads first: the launch profile's rendering plus the proxy's admin token
file (so a rolling restart can drain an instance), validated against the inventory right now."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import PurePosixPath

from .inventory_lookup import cluster_facts
from .revision_checks import RevisionInvalid, validate_spec
from .topology import (
    Plan,
    PlannedProcess,
    Stage,
    TopologySpec,
    detached_start_command,
    get_profile,
    spec_from_dict,
)


def admin_token_path(spec: TopologySpec) -> PurePosixPath:
    return PurePosixPath(spec.run_dir) / "secrets" / "proxy-admin.token"


def admin_header_path(spec: TopologySpec) -> PurePosixPath:
    """The same token as an HTTP header line, for `curl -H @file` on the proxy node (never on a command line)."""
    return PurePosixPath(spec.run_dir) / "secrets" / "proxy-admin.header"


def revision_spec(revision) -> TopologySpec:
    return spec_from_dict(revision.spec)


def render_plan(spec: TopologySpec, cluster, *, deployment_id: int | None = None) -> Plan:
    problems = validate_spec(spec, cluster=cluster, deployment_id=deployment_id)
    if problems:
        raise RevisionInvalid(problems, spec)
    facts = cluster_facts(cluster, launch_profile=spec.launch_profile)
    plan = get_profile(spec.launch_profile).render(spec, facts)
    return _with_admin_token(plan, spec)


def _with_admin_token(plan: Plan, spec: TopologySpec) -> Plan:
    def fix(p: PlannedProcess) -> PlannedProcess:
        if p.role != "proxy":
            return p
        argv = (*p.launch.argv, "--admin-token-file", str(admin_token_path(spec)))
        return replace(p, launch=replace(p.launch, argv=argv))

    return Plan(profile=plan.profile, stages=tuple(Stage(s.name, tuple(map(fix, s.processes))) for s in plan.stages))


def deployment_plan(deployment, revision=None) -> tuple[TopologySpec, Plan]:
    """Spec and plan of a revision (default: the active one); RevisionInvalid if it no longer validates."""
    revision = revision or deployment.active_revision
    if revision is None:
        raise RevisionInvalid([_no_revision()])
    spec = revision_spec(revision)
    return spec, render_plan(spec, deployment.cluster, deployment_id=deployment.pk)


def _no_revision():
    from .topology import Problem

    return Problem("revision", "the deployment has no active revision", "save a spec, then activate it")


def start_line(p: PlannedProcess) -> str:
    return detached_start_command(p.launch)


def fingerprint(p: PlannedProcess) -> str:
    return hashlib.sha256(start_line(p).encode()).hexdigest()


def plan_by_node(plan: Plan) -> list[dict]:
    """For the plan page: stages, and in each the nodes with their processes and exact start lines."""
    out = []
    for n, stage in enumerate(plan.stages, 1):
        nodes: dict[str, dict] = {}
        for p in stage.processes:
            entry = nodes.setdefault(p.node, {"node": p.node, "address": p.address, "processes": []})
            entry["processes"].append({"key": p.key, "role": p.role, "instance": p.instance, "ports": list(p.ports),
                                       "kv_port_window": list(p.kv_port_window) if p.kv_port_window else None,
                                       "health_url": p.health_url, "log_file": str(p.launch.log_file),
                                       "pid_file": str(p.launch.pid_file), "command": start_line(p)})
        out.append({"number": n, "name": stage.name, "nodes": list(nodes.values())})
    return out


def revision_diff(old, new) -> list[tuple[str, object, object]]:
    """Field-by-field changes from one revision to another (instances matched by name)."""
    from .topology import spec_diff

    return spec_diff(revision_spec(old), revision_spec(new))
