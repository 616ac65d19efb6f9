"""What the other deployments of a cluster hold (NPU dies per node, listening ports per node address) and the
problems of a spec that would take any of it: two deployments must never be saved, or deployed, onto the same
dies or ports.

A deployment holds:
- what its active revision renders to, whether it runs or not: saving (activating) a revision is what claims its
  dies and ports, so two deployments cannot both be saved onto one node's dies and then race to deploy. Keep
  alternative topologies for the same nodes as revisions of one deployment: a deployment never conflicts with
  its own revisions, and activating one releases the other;
- what its processes recorded as running (or unknown: the node could not be asked, so they may well run) were
  started with, when they came from another revision than the active one: they hold their dies and ports until a
  deploy replaces them or a stop ends them.
Its dies are the placement's assignment per instance and node (topology/placement.py, what the profiles slice
ASCEND_RT_VISIBLE_DEVICES from); its ports are the plan's PlannedProcess.ports and kv_port_window. A process row
records its ports and the exact start line (whose ASCEND_RT_VISIBLE_DEVICES the profile owns); its kv window is
arithmetic on its revision's spec. An active revision that no longer validates against the inventory is left out
(its running processes still count), so one broken deployment never makes every other unsavable.

Two queries whatever the number of deployments: the caller's active revisions of the others, and here their
process rows (with their revisions); each other plan is rendered once per check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .choices import ProcessState
from .topology import (
    NO_ALLOWLIST,
    ClusterAllowlist,
    NodeFacts,
    Problem,
    TopologySpec,
    build_plan,
    spec_from_dict,
)
from .topology import ports as port_math
from .topology.placement import assign_devices
from .topology.port_rules import listener_claims

HOLDING_STATES = (ProcessState.RUNNING, ProcessState.UNKNOWN)
_VISIBLE_RE = re.compile(r"(?:^|[\s'])ASCEND_RT_VISIBLE_DEVICES=([0-9][0-9,]*)")
_INSTANCE_FIELD = re.compile(r"^instances\[(\d+)\]\.(\w+)$")
_LISTED = 4  # names a problem lists before "and N more"


@dataclass(frozen=True)
class Held:
    """Dies of one node, or ports of one address, that another deployment holds."""

    deployment: str
    node: str
    address: str
    what: str  # "p0 dies 0-15", "p0-dp1 port 7101", "p0 kv window 30000-30015"
    source: str  # "active revision r3", "running, started from r2"
    dies: frozenset[int] = frozenset()
    ports: range = range(0)


# --- what the others hold ---------------------------------------------------------------------------------------

def held_by_others(cluster, deployment_id: int | None, *, active: Iterable, facts_for: Callable[[str], dict],
                   allowlist: ClusterAllowlist = NO_ALLOWLIST) -> list[Held]:
    """Everything the cluster's other deployments hold. `active`: their active revisions (deployment loaded);
    `facts_for(launch_profile)`: the inventory's NodeFacts (read once by the caller)."""
    from .models import Process

    active = list(active)
    rows = (Process.objects.filter(deployment__cluster=cluster, state__in=HOLDING_STATES)
            .exclude(deployment_id=deployment_id).select_related("deployment", "revision").order_by("pk"))
    out: list[Held] = []
    rendered: set[int] = set()  # deployments whose active revision rendered: its own rows are in its plan
    active_ids = set()
    for revision in active:
        holds = _active_holds(revision, facts_for, allowlist)
        active_ids.add(revision.pk)
        if holds is not None:
            out += holds
            rendered.add(revision.deployment_id)
    specs: dict[int, TopologySpec | None] = {}
    for row in rows:
        if row.deployment_id in rendered and row.revision_id in active_ids:
            continue
        out += _row_holds(row, specs)
    return out


def _active_holds(revision, facts_for, allowlist: ClusterAllowlist) -> list[Held] | None:
    """None when the revision no longer parses, validates or renders against the inventory."""
    try:
        spec = spec_from_dict(revision.spec)
        facts = facts_for(spec.launch_profile)
        plan = build_plan(spec, facts, allowlist)  # SpecError and TopologyInvalid are ValueErrors
    except ValueError:
        return None
    name, source = revision.deployment.name, f"active revision r{revision.number}"
    out = [Held(name, node, facts[node].address, f"{inst} dies {_ids(dies)}", source, dies=frozenset(dies))
           for (inst, node), dies in assign_devices(spec, facts).items() if dies]
    for p in plan.processes:
        out += [Held(name, p.node, p.address, f"{p.key} port {port}", source, ports=range(port, port + 1))
                for port in p.ports]
        if p.kv_port_window:
            first, last = p.kv_port_window
            out.append(Held(name, p.node, p.address, f"{p.key} kv window {first}-{last}", source,
                            ports=range(first, last + 1)))
    return out


def _row_holds(row, specs: dict[int, TopologySpec | None]) -> list[Held]:
    name = row.deployment.name
    state = "running" if row.state == ProcessState.RUNNING else "state unknown"
    source = f"{state}, started from r{row.revision.number}" if row.revision else state
    out = []
    for port in row.ports or ():
        if isinstance(port, int):
            out.append(Held(name, row.node_name, row.address, f"{row.key} port {port}", source,
                            ports=range(port, port + 1)))
    found = _VISIBLE_RE.search(row.command or "")
    dies = frozenset(int(d) for d in found.group(1).split(",") if d) if found else frozenset()
    if dies:
        out.append(Held(name, row.node_name, row.address, f"{row.key} dies {_ids(dies)}", source, dies=dies))
    window = _row_kv_window(row, specs)
    if window:
        out.append(Held(name, row.node_name, row.address, f"{row.key} kv window {port_math.show(window)}", source,
                        ports=window))
    return out


def _row_kv_window(row, specs: dict[int, TopologySpec | None]) -> range | None:
    """The side-channel ports of an engine process, from the spec of the revision it was started from."""
    if row.role not in ("prefill", "decode") or row.revision is None:
        return None
    if row.revision_id not in specs:
        try:
            specs[row.revision_id] = spec_from_dict(row.revision.spec)
        except ValueError:
            specs[row.revision_id] = None
    spec = specs[row.revision_id]
    inst = next((i for i in spec.instances if i.name == row.instance), None) if spec else None
    slot = next((s for s in port_math.engine_slots(inst) if s.key == row.key), None) if inst else None
    return port_math.kv_window(inst, slot.ranks) if slot else None


# --- what this spec would take ----------------------------------------------------------------------------------

def overlap_problems(spec: TopologySpec, nodes: dict[str, NodeFacts], held: list[Held]) -> list[Problem]:
    """One problem per die claim (instance, node) or listener of this spec and other deployment it collides with."""
    if not held:
        return []
    return _die_problems(spec, nodes, held) + _port_problems(spec, nodes, held)


def _die_problems(spec: TopologySpec, nodes: dict[str, NodeFacts], held: list[Held]) -> list[Problem]:
    assigned = assign_devices(spec, nodes)
    held_dies: dict[str, set[int]] = {}
    for h in held:
        if h.dies:
            held_dies.setdefault(h.node, set()).update(h.dies)
    out = []
    for k, inst in enumerate(spec.instances):
        for node in inst.span:
            mine = set(assigned.get((inst.name, node), ()))
            hits = [h for h in held if h.node == node and h.dies & mine]
            if not hits:
                continue
            fix = _die_fix(spec, inst, nodes, assigned, held_dies, hits)
            for other, theirs in _by_deployment(hits):
                clash = set().union(*(h.dies & mine for h in theirs))
                out.append(Problem(f"instances[{k}].devices",
                                   f"{inst.name} on {node} uses NPU dies {_ids(clash)}, which deployment {other} "
                                   f"already claims there: {_listing(theirs)}", fix))
    return out


def _die_fix(spec, inst, nodes, assigned, held_dies, hits) -> str:
    def free_on(node: str) -> set[int]:
        facts = nodes.get(node)
        if facts is None:
            return set()
        mine = {d for i in spec.instances if i is not inst for d in assigned.get((i.name, node), ())}
        return set(facts.healthy_logical_ids) - held_dies.get(node, set()) - mine

    common = set.intersection(*(free_on(n) for n in inst.span))
    if len(common) >= inst.npus:
        ids = sorted(common)[: inst.npus]
        where = " and ".join(inst.span)
        return f"use devices {_ids(ids)} on {where}: devices: [{', '.join(map(str, ids))}]"
    if len(inst.span) == 1:
        roomy = [(n, sorted(free_on(n))) for n, f in sorted(nodes.items()) if n != inst.node and f.npu_count]
        roomy = [(n, ids) for n, ids in roomy if len(ids) >= inst.npus]
        if roomy:
            n, ids = roomy[0]
            return (f"move {inst.name} to {n} (node: {n}) with devices: "
                    f"[{', '.join(map(str, ids[: inst.npus]))}], free there")
    others = ", ".join(sorted({h.deployment for h in hits}))
    short = (f"no node has {inst.npus} NPU dies free of the other deployments" if len(inst.span) == 1 else
             f"{' and '.join(inst.span)} have no {inst.npus} NPU dies free of the other deployments in common")
    return (f"{short}: give deployment {others} other dies, or delete it first (a stopped deployment still "
            "claims what its active revision uses)")


def _port_problems(spec: TopologySpec, nodes: dict[str, NodeFacts], held: list[Held]) -> list[Problem]:
    claims = listener_claims(spec, nodes)  # every listener validation checks, each with its spec path
    adxl: dict[str, range] = {}
    for inst in spec.instances:
        for name in inst.span:
            if name in nodes and nodes[name].npu_count:
                adxl[nodes[name].address] = port_math.adxl_range(spec, inst, nodes[name])
    out = []
    for claim in claims:
        hits = [h for h in held if h.ports and h.address == claim.address and _overlap(h.ports, claim.ports)]
        if not hits:
            continue
        fix = _port_fix(spec, claim, claims, held, adxl)
        for other, theirs in _by_deployment(hits):
            out.append(Problem(claim.path, f"{claim.what} {port_math.show(claim.ports)} on {claim.node} "
                               f"({claim.address}) collides with deployment {other}: {_listing(theirs)}", fix))
    return out


def _port_fix(spec: TopologySpec, claim, claims, held: list[Held], adxl: dict[str, range]) -> str:
    """The lowest value of the claim's field, at or above today's, that moves every listener the field sets
    (one per node for an instance's API ports and kv window) clear of the others, this spec's and Mooncake's."""
    match = _INSTANCE_FIELD.match(claim.path)
    field = f"{spec.instances[int(match.group(1))].name}'s {match.group(2)}" if match else claim.path
    group = [c for c in claims if c.path == claim.path]
    base = min(c.ports.start for c in group)
    busy: dict[str, list[range]] = {}
    for h in held:
        if h.ports:
            busy.setdefault(h.address, []).append(h.ports)
    for c in claims:
        if c.path != claim.path:
            busy.setdefault(c.address, []).append(c.ports)
    for address, reserved in adxl.items():
        busy.setdefault(address, []).append(reserved)
    start = base
    while True:
        moved = [(c, range(c.ports.start - base + start, c.ports.stop - base + start)) for c in group]
        if any(r.stop - 1 > 65535 for _c, r in moved):
            return f"pick another {field}: nothing above {base} is free on {claim.node}"
        hit = next(((c, b) for c, r in moved for b in busy.get(c.address, ()) if _overlap(b, r)), None)
        if hit is None:
            return f"set {field} to {start} (free on {', '.join(sorted({c.node for c in group}))})"
        c, b = hit
        start = b.stop - (c.ports.start - base)


# --- wording ----------------------------------------------------------------------------------------------------

def _by_deployment(hits: list[Held]) -> list[tuple[str, list[Held]]]:
    grouped: dict[str, list[Held]] = {}
    for h in hits:
        grouped.setdefault(h.deployment, []).append(h)
    return sorted(grouped.items())


def _listing(holds: list[Held]) -> str:
    """"its p0-dp0 port 7100, p0-dp1 port 7101 (active revision r1)", sources kept apart, long lists cut."""
    by_source: dict[str, list[str]] = {}
    for h in holds:
        by_source.setdefault(h.source, []).append(h.what)
    parts = []
    for source, whats in by_source.items():
        shown = ", ".join(whats[:_LISTED]) + (f" and {len(whats) - _LISTED} more" if len(whats) > _LISTED else "")
        parts.append(f"its {shown} ({source})")
    return "; ".join(parts)


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


def _ids(ids) -> str:
    """0-7, or 0, 2, 5 when not contiguous."""
    ids = sorted(ids)
    if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(map(str, ids))
