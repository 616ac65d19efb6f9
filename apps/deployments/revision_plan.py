"""The plan a job runs and the operator reads first: the revision checked against the inventory and the other
deployments right now, then exactly what the pure core's build_plan renders for the inventory's node facts."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping

from .claims import HOLDING_STATES
from .inventory_lookup import cluster_allowlist, cluster_facts, cluster_nodes
from .revision_checks import RevisionInvalid, validate_spec
from .topology import (
    Plan,
    PlannedProcess,
    TopologyInvalid,
    TopologySpec,
    build_plan,
    detached_start_command,
    spec_from_dict,
)


def revision_spec(revision) -> TopologySpec:
    return spec_from_dict(revision.spec)


def render_plan(spec: TopologySpec, cluster, *, deployment_id: int | None = None, database_checks: bool = True) -> Plan:
    """The plan against the inventory now. Without database_checks (run dirs and the dies and ports other
    deployments hold) it only says where a revision's processes and files are, e.g. an old one's to clean up."""
    problems = validate_spec(spec, cluster=cluster, deployment_id=deployment_id) if database_checks else []
    if problems:
        raise RevisionInvalid(problems, spec)
    try:
        return build_plan(spec, cluster_facts(cluster, launch_profile=spec.launch_profile), cluster_allowlist(cluster))
    except TopologyInvalid as exc:  # the inventory changed between the two reads
        raise RevisionInvalid(exc.problems, spec) from None


def deployment_plan(deployment, revision=None) -> tuple[TopologySpec, Plan]:
    """Spec and plan of a revision (default: the active one); RevisionInvalid if it no longer validates."""
    revision = revision or deployment.active_revision
    if revision is None:
        raise RevisionInvalid([_no_revision()])
    spec = revision_spec(revision)
    return spec, render_plan(spec, deployment.cluster, deployment_id=deployment.pk)


PLANS_KEPT = 32  # plans remembered by this process (a plan of 256 instances is about 2 MB of objects)
_plans: OrderedDict[str, tuple[TopologySpec, Plan]] = OrderedDict()
_plans_lock = threading.Lock()


def deployment_plan_cached(deployment, revision=None, *, inventory: dict | None = None) -> tuple[TopologySpec, Plan]:
    """deployment_plan, remembered in this process by what it is computed from: the revision (never changed once
    saved), the inventory's nodes and dies (`inventory`: cluster_nodes, if the caller has it), and what the
    cluster's other deployments hold (their active revisions and their running processes). A change to any of them
    is another key; a plan that does not validate is never kept. For pages that read the plan often: jobs plan
    afresh."""
    revision = revision or deployment.active_revision
    if revision is None:
        return deployment_plan(deployment, revision)
    key = plan_inputs_key(deployment, revision, inventory if inventory is not None else cluster_nodes(deployment.cluster))
    with _plans_lock:
        hit = _plans.get(key)
        if hit is not None:
            _plans.move_to_end(key)
            return hit
    found = deployment_plan(deployment, revision)
    with _plans_lock:
        _plans[key] = found
        while len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    return found


def plan_inputs_key(deployment, revision, inventory: dict) -> str:
    """A digest of everything deployment_plan reads (two small queries besides the inventory given)."""
    from .models import Process, Revision

    nodes = sorted((n.name, n.address, n.npu_count, n.hardware_model, json.dumps(n.labels or {}, sort_keys=True),
                    sorted((d.logical_id, d.phy_id, d.health, d.hbm_total_mb) for d in n.npus.all())) for n in inventory.values())
    others = Revision.objects.filter(is_active=True, deployment__cluster_id=deployment.cluster_id).exclude(
        deployment_id=deployment.pk).order_by("pk").values_list("pk", "deployment__name")
    held = (Process.objects.filter(deployment__cluster_id=deployment.cluster_id, state__in=HOLDING_STATES)
            .exclude(deployment_id=deployment.pk).order_by("pk")
            .values_list("pk", "deployment_id", "revision_id", "state", "role", "node_name", "address", "ports",
                         "fingerprint"))
    allowlist = json.dumps(deployment.cluster.allowlist or {}, sort_keys=True)
    text = repr((deployment.pk, deployment.cluster_id, revision.pk, nodes, allowlist, list(others), list(held)))
    return hashlib.sha256(text.encode()).hexdigest()


def _no_revision():
    from .topology import Problem

    return Problem("revision", "the deployment has no active revision", "save a spec, then activate it")


def start_line(p: PlannedProcess) -> str:
    return detached_start_command(p.launch)


def fingerprint(p: PlannedProcess) -> str:
    return hashlib.sha256(start_line(p).encode()).hexdigest()


def plan_by_node(plan: Plan, start_lines: Mapping[str, str] | None = None) -> list[dict]:
    """For the plan page: stages, and in each the nodes with their processes and exact start lines (a runtime's own,
    such as a container's `docker run`, from `start_lines`)."""
    out = []
    for n, stage in enumerate(plan.stages, 1):
        nodes: dict[str, dict] = {}
        for p in stage.processes:
            entry = nodes.setdefault(p.node, {"node": p.node, "address": p.address, "processes": []})
            entry["processes"].append({"key": p.key, "role": p.role, "instance": p.instance, "ports": list(p.ports),
                                       "kv_port_window": list(p.kv_port_window) if p.kv_port_window else None,
                                       "health_url": p.health_url, "log_file": str(p.launch.log_file),
                                       "pid_file": str(p.launch.pid_file),
                                       "command": (start_lines or {}).get(p.key) or start_line(p)})
        out.append({"number": n, "name": stage.name, "nodes": list(nodes.values())})
    return out


def revision_diff(old, new) -> list[tuple[str, object, object]]:
    """Field-by-field changes from one revision to another (instances matched by name)."""
    from .topology import spec_diff

    return spec_diff(revision_spec(old), revision_spec(new))
