"""The topology read model of a deployment's active revision, for the SVG picture and the API: nodes with their NPU
dies, the planned processes on them grouped by instance with their live state, and the edges between them. The
`live` section is the telemetry scrapers' last round (Redis, keyed by deployment), or None when there is none.

Pure read with a constant number of queries. The picture is computed from the plan (the same `deployment_plan` every
job runs), which this process remembers for as long as its inputs stay the same (`deployment_plan_cached`); Process
rows only contribute live state.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from django.core.cache import cache
from django.db.models import F

from apps.deployments.choices import ProcessRole, ProcessState
from apps.deployments.inventory_lookup import cluster_allowlist, cluster_nodes, node_facts
from apps.deployments.models import Deployment, Process
from apps.deployments.revision_checks import RevisionInvalid, name_problem, spec_errors_as_problems
from apps.deployments.revision_plan import deployment_plan_cached
from apps.deployments.topology import (
    ClusterAllowlist,
    Plan,
    PlannedProcess,
    SpecError,
    TopologySpec,
    fit_estimates,
    get_profile,
    validate_topology,
)
from apps.inventory.choices import NpuHealth, Reachability
from apps.inventory.models import Node
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job

from .edge_ids import edge_id, instance_end, is_kv_edge, process_end
from .selectors import (
    MESH_DETAIL_MAX_PAIRS,
    PUSHED_EDGE_FIELDS,
    _rounded,
    aggregated,
    busy,
    history_key,
    live_key,
    live_view,
    push_view,
)

ENGINE_ROLES = ("prefill", "decode")
# Worst first: an instance shows the worst state of its processes.
STATE_SEVERITY = (ProcessState.FAILED, ProcessState.UNKNOWN, ProcessState.STOPPED, ProcessState.RUNNING)
NOT_STARTED = {"state": None, "state_label": "not started", "state_colour": "grey"}


def topology_snapshot(deployment: Deployment) -> dict:
    """Everything the topology picture draws, as plain JSON-ready data; problems instead of an exception."""
    revision = deployment.revisions.filter(is_active=True).first()
    out = {
        "deployment": {"id": deployment.pk, "name": deployment.name},
        "revision": {"id": revision.pk, "number": revision.number} if revision else None,
        "profile": None, "problems": [], "client": None, "nodes": [], "instances": [], "services": [],
        "edges": [], "stray_processes": [], "active_job": _active_job(deployment), "drawn_despite_problems": False,
        "state_colours": ProcessState.colours(), "role_colours": ProcessRole.colours(),
        "live": live_section(deployment.pk), "kv_mesh": None,
    }
    inventory = cluster_nodes(deployment.cluster)
    try:
        spec, plan = deployment_plan_cached(deployment, revision, inventory=inventory)
    except RevisionInvalid as exc:
        out["problems"] = [name_problem(p, revision.spec if revision else None).as_dict() for p in exc.problems]
        plan = _plan_ignoring_npu_health(exc.spec, inventory, cluster_allowlist(deployment.cluster))
        if plan is None:
            return out
        spec = exc.spec
    except SpecError as exc:  # a stored spec that no longer parses (the parser got stricter)
        out["problems"] = [name_problem(p, revision.spec).as_dict() for p in spec_errors_as_problems(exc)]
        return out
    # The revision's number only: a joined revision would parse its spec once per row.
    rows = {p.key: p for p in Process.objects.filter(deployment=deployment).annotate(
        started_revision_number=F("revision__number"))}
    out["profile"] = plan.profile
    out["drawn_despite_problems"] = bool(out["problems"])
    health = (out["live"] or {}).get("health") or {}
    out["instances"] = [{**i, "health": health.get(i["name"])} for i in _instances(spec, plan, rows)]
    out["services"] = [{**_service(p, rows.get(p.key), spec), "health": health.get(p.key)}
                       for p in plan.processes if p.role not in ENGINE_ROLES]
    out["nodes"] = _nodes(plan, inventory, out["instances"])
    out["client"] = _client(spec, inventory)
    out["edges"] = topology_edges(spec, plan)
    out["kv_mesh"] = kv_mesh(spec)
    planned = {p.key for p in plan.processes}
    out["stray_processes"] = [
        {"key": r.key, "node": r.node_name, "role": r.role, "pid": r.pid, **_state_of(r)}
        for key, r in sorted(rows.items()) if key not in planned and r.state != ProcessState.STOPPED]
    return out


def _plan_ignoring_npu_health(spec: TopologySpec | None, inventory: dict[str, Node],
                              allowlist: ClusterAllowlist) -> Plan | None:
    """When the only thing wrong is a die that went bad, still draw where everything is planned (the moment a die
    fails is when the picture matters most): the plan as if every die were healthy, if that one is clean."""
    if spec is None:
        return None
    facts = {}
    for name, node in inventory.items():
        f = node_facts(node, launch_profile=spec.launch_profile)
        facts[name] = replace(f, healthy_logical_ids=frozenset(range(f.npu_count)))
    if validate_topology(spec, facts, allowlist):
        return None
    return replace(get_profile(spec.launch_profile).render(spec, facts, allowlist), hbm=fit_estimates(spec, facts))


# --- live state ------------------------------------------------------------------------------------------------

SPARK_FIELD = {"prefill": "prompt_tok_s", "decode": "gen_tok_s"}  # the sparkline of each role (static/js/topology/sparklines.js)


def live_section(deployment_id: int) -> dict | None:
    """The telemetry's last round (selectors.live_view), or None when nothing was scraped lately. A mesh the
    picture aggregates is served as a round's push carries it (only what the page draws, numbers to the digits it
    shows), with its busy pairs and request legs, and of each instance's history only its sparkline's series."""
    got = cache.get_many([live_key(deployment_id), history_key(deployment_id)])
    state = got.get(live_key(deployment_id))
    if state is None:
        return None
    history = got.get(history_key(deployment_id)) or []
    if not aggregated(state["instances"]):
        return live_view(state, history)
    out = push_view(state, history[-1] if history else {"at": state["at"], "instances": {}})
    del out["history_point"]
    out["edges"] = _rounded({e: {k: d.get(k) for k in PUSHED_EDGE_FIELDS} for e, d in state["edges"].items()
                             if not is_kv_edge(e) or busy(d)})
    fields = {name: SPARK_FIELD.get(i.get("role")) for name, i in state["instances"].items()}
    out["history"] = {
        "at": [h["at"] for h in history], "edges": {},
        "instances": {name: {field: _rounded([h["instances"].get(name, {}).get(field) for h in history])}
                      for name, field in fields.items() if field},
    }
    return out


# --- process state ---------------------------------------------------------------------------------------------

def _state_of(row: Process | None) -> dict:
    if row is None:
        return dict(NOT_STARTED)
    return {"state": row.state, "state_label": row.get_state_display(), "state_colour": row.colour}


def _worst(states: list[dict]) -> dict:
    known = [s for s in states if s["state"] is not None]
    if not known:
        return dict(NOT_STARTED)
    worst = min(known, key=lambda s: STATE_SEVERITY.index(s["state"]))
    return {k: worst[k] for k in ("state", "state_label", "state_colour")}


def _row_facts(row: Process | None) -> dict:
    if row is None:
        return {"pid": None, "state_detail": "", "started_at": None, "started_revision": None}
    return {"pid": row.pid, "state_detail": row.state_detail,
            "started_at": row.started_at.isoformat() if row.started_at else None,
            "started_revision": row.started_revision_number}


def _active_job(deployment: Deployment) -> dict | None:
    job = (Job.objects.filter(target_type=Deployment._meta.label_lower, target_id=deployment.pk,
                              status__in=(JobStatus.PENDING, JobStatus.RUNNING))
           .order_by("-created", "-id").only("pk", "kind", "status").first())
    return {"id": job.pk, "kind": job.kind, "status": job.status} if job else None


# --- processes ---------------------------------------------------------------------------------------------------

def _devices(p: PlannedProcess) -> list[int]:
    text = p.launch.env.get("ASCEND_RT_VISIBLE_DEVICES", "")
    return [int(d) for d in text.split(",") if d.strip().isdecimal()]


def _instances(spec: TopologySpec, plan: Plan, rows: dict[str, Process]) -> list[dict]:
    by_name: dict[str, list[PlannedProcess]] = defaultdict(list)
    for p in plan.processes:
        if p.role in ENGINE_ROLES:
            by_name[p.instance].append(p)
    hbm = {fit.instance: fit.as_dict() for fit in plan.hbm}
    out = []
    for inst in spec.instances:
        ranks = []
        for p in by_name[inst.name]:
            devices = _devices(p)
            # An internal-DP process hosts several ranks: its devices split in TP-sized runs, in rank order.
            count = max(1, len(devices) // inst.tp) if inst.tp else 1
            headless = not p.ports and p.health_url is None  # an internal-DP secondary: no API server
            for i in range(count):
                dp_rank = (p.dp_rank or 0) + i
                ranks.append({
                    "key": p.key, "dp_rank": dp_rank, "api_port": p.ports[0] if p.ports else None,
                    "ports": list(p.ports), "devices": devices[i * inst.tp:(i + 1) * inst.tp] if count > 1 else devices,
                    "kv_port_window": _rank_window(inst, dp_rank) if count > 1 else
                    (list(p.kv_port_window) if p.kv_port_window else None),
                    "node": p.node, "address": p.address, "health_url": p.health_url, "headless": headless,
                    **_state_of(rows.get(p.key)), **_row_facts(rows.get(p.key)),
                })
        ranks.sort(key=lambda r: r["dp_rank"])
        windows = [r["kv_port_window"] for r in ranks if r["kv_port_window"]]
        span = list(inst.span)
        out.append({
            "id": instance_end(inst.name), "name": inst.name, "role": inst.role, "role_colour": ProcessRole(inst.role).colour,
            "node": inst.node, "nodes": span, "tp": inst.tp, "dp": inst.dp, "dp_local": inst.dp_local,
            "dp_style": inst.dp_style, "ep": inst.ep if inst.expert_parallel else None,
            "span_label": f"TP{inst.tp} × DP{inst.dp}" + (f" · EP{inst.ep}" if inst.expert_parallel else "")
            + (f" over {len(span)} nodes" if len(span) > 1 else ""),
            "kv_port_window": [min(w[0] for w in windows), max(w[1] for w in windows)] if windows else None,
            "ranks": ranks, "slices": [_slice(node, [r for r in ranks if r["node"] == node]) for node in span],
            "hbm": hbm.get(inst.name),  # the HBM fit estimate per die (docs/hbm-fit.md), None when not checked
            **_worst(ranks),
        })
    return out


def _slice(node: str, ranks: list[dict]) -> dict:
    """The part of an instance on one of its nodes, as a compact box draws it: which ranks, API ports, dies and
    side-channel ports, how many processes (one per rank, or one for all: internal DP) and whether headless."""
    keys = list(dict.fromkeys(r["key"] for r in ranks))
    windows = [r["kv_port_window"] for r in ranks if r["kv_port_window"]]
    per_process = list({r["key"]: r for r in ranks}.values())
    return {
        "node": node, "ranks": [ranks[0]["dp_rank"], ranks[-1]["dp_rank"]] if ranks else [],
        "api_ports": sorted({r["api_port"] for r in ranks if r["api_port"] is not None}),
        "devices": sorted({d for r in ranks for d in r["devices"]}), "processes": len(keys), "keys": keys,
        "kv_port_window": [min(w[0] for w in windows), max(w[1] for w in windows)] if windows else None,
        "headless": bool(ranks) and all(r["headless"] for r in ranks),
        **_worst(per_process),
    }


def _rank_window(inst, dp_rank: int) -> list[int]:
    start = inst.kv_port + dp_rank * inst.tp
    return [start, start + inst.tp - 1]


def _service(p: PlannedProcess, row: Process | None, spec: TopologySpec) -> dict:
    backend = None
    if p.role == "kv_pool" and spec.kv_pool:
        backend = spec.kv_pool.backend
    elif p.role == "store":
        backend = "memcached"
    return {"id": process_end(p.key), "key": p.key, "role": p.role, "role_colour": ProcessRole.colour_of(p.role),
            "node": p.node, "address": p.address, "ports": list(p.ports), "health_url": p.health_url,
            "backend": backend, **_state_of(row), **_row_facts(row)}


# --- nodes -------------------------------------------------------------------------------------------------------

def _column(roles: set[str]) -> str:
    for role in ("prefill", "decode", "proxy"):
        if role in roles:
            return {"proxy": "front"}.get(role, role)
    return "services"


def _nodes(plan: Plan, inventory: dict[str, Node], instances: list[dict]) -> list[dict]:
    used_by: dict[str, dict[int, dict]] = defaultdict(dict)
    on_node: dict[str, list[str]] = defaultdict(list)
    span_of: dict[str, dict] = {}
    for inst in instances:
        for r in inst["ranks"]:
            if inst["name"] not in on_node[r["node"]]:
                on_node[r["node"]].append(inst["name"])
            for d in r["devices"]:
                used_by[r["node"]][d] = {"instance": inst["name"], "role": inst["role"], "dp_rank": r["dp_rank"],
                                         "key": r["key"]}
        if len(inst["nodes"]) > 1:
            for k, name in enumerate(inst["nodes"]):
                span_of.setdefault(name, {"instance": inst["name"], "index": k, "of": len(inst["nodes"])})
    roles: dict[str, set[str]] = defaultdict(set)
    processes: dict[str, list[str]] = defaultdict(list)
    for p in plan.processes:
        roles[p.node].add(p.role)
        processes[p.node].append(p.key)
    out = []
    for name in dict.fromkeys(p.node for p in plan.processes):
        node = inventory[name]
        npus = {n.logical_id: n for n in node.npus.all()}
        count = max([node.npu_count, *(i + 1 for i in npus)]) if npus or node.npu_count else 0
        dies = []
        for logical_id in range(count):
            npu = npus.get(logical_id)
            health = npu.health if npu else None
            dies.append({
                "logical_id": logical_id, "npu_id": npu.npu_id if npu else logical_id // 2,
                "chip_id": npu.chip_id if npu else logical_id % 2, "health": health,
                "health_colour": NpuHealth.colour_of(health),
                "ok": health in (None, NpuHealth.OK),  # undiscovered counts as usable, as planning does
                "discovered": npu is not None, "hbm_percent": npu.hbm_percent if npu else None,
                "hbm_used_mb": npu.hbm_used_mb if npu else None, "hbm_total_mb": npu.hbm_total_mb if npu else None,
                "used_by": used_by[name].get(logical_id),
            })
        out.append({
            "name": name, "address": node.address, "hardware_model": node.hardware_model,
            "npu_model": node.npu_model, "npu_count": node.npu_count,
            "reachability": node.reachability, "reachability_label": node.get_reachability_display(),
            "reachability_colour": Reachability.colour_of(node.reachability),
            "column": _column(roles[name]), "roles": sorted(roles[name]), "processes": processes[name],
            "instances": on_node[name], "span": span_of.get(name), "dies": dies,
        })
    return out


def _client(spec: TopologySpec, inventory: dict[str, Node]) -> dict:
    if spec.bench_client is None:
        return {"id": "client", "node": None, "address": None}
    node = inventory.get(spec.bench_client.node)
    return {"id": "client", "node": spec.bench_client.node, "address": node.address if node else None}


# --- edges -------------------------------------------------------------------------------------------------------

POOL_NAMES = {"mooncake": "Mooncake master", "memcache": "MemCache MetaService"}
STORE_GROUP = "group:store"  # the simulated cluster's memcached ring, drawn as one box: it is one pool


def pool_mode(spec: TopologySpec, role: str) -> str:
    """What an instance does with the pool (AscendStoreConnector): Prefill loads and puts prefix blocks; Decode
    only as kv_pool's consumer_is_to_load / consumer_is_to_put say, else it just lends the pool its memory."""
    if role == "prefill":
        return "load + put"
    pool = spec.kv_pool
    doing = [w for w, on in (("load", pool and pool.consumer_is_to_load), ("put", pool and pool.consumer_is_to_put))
             if on]
    return " + ".join(doing) or "holds pool memory"


KV_FABRIC = "kv-fabric"  # the P->D mesh drawn as one bus when it has more pairs than the picture can draw


def kv_mesh(spec: TopologySpec) -> dict:
    """The P->D hand-over mesh: its size, and whether the picture draws it per pair or aggregated per instance."""
    p = sum(i.role == "prefill" for i in spec.instances)
    d = sum(i.role == "decode" for i in spec.instances)
    return {"prefills": p, "decodes": d, "pairs": p * d, "aggregated": p * d > MESH_DETAIL_MAX_PAIRS,
            "max_drawn_pairs": MESH_DETAIL_MAX_PAIRS}


def topology_edges(spec: TopologySpec, plan: Plan) -> list[dict]:
    """The request path and the KV paths, derived from the plan: client -> proxy -> every P -> every D
    (the KV hand-over, labelled with both side-channel windows; a large mesh as every P -> the KV fabric -> every D), every P/D -> the KV pool (its master, or the
    simulated memcached ring as one group)."""
    procs = plan.processes
    proxy = next((p for p in procs if p.role == "proxy"), None)
    pool = next((p for p in procs if p.role == "kv_pool"), None)
    stores = [p for p in procs if p.role == "store"]
    windows: dict[str, tuple[int, int]] = {}
    for p in procs:
        if p.kv_port_window and p.instance:
            lo, hi = windows.get(p.instance, p.kv_port_window)
            windows[p.instance] = (min(lo, p.kv_port_window[0]), max(hi, p.kv_port_window[1]))
    prefills = [i for i in spec.instances if i.role == "prefill"]
    decodes = [i for i in spec.instances if i.role == "decode"]
    mesh = kv_mesh(spec)
    edges = []

    def add(kind: str, source: str, target: str, label: str, **extra):
        edges.append({"id": edge_id(kind, source, target), "kind": kind, "source": source, "target": target,
                      "label": label, **extra})

    def window(name: str) -> str:
        lo, hi = windows.get(name, (0, 0))
        return f"{lo}-{hi}" if hi != lo else str(lo)

    if proxy:
        add("request", "client", process_end(proxy.key), f"HTTP :{proxy.ports[0]}")
        for inst in prefills:
            add("request", process_end(proxy.key), instance_end(inst.name), "prefill request")
    if mesh["aggregated"]:  # one edge per instance into or out of the KV fabric, not one per pair
        for p in prefills:
            add("kv_fabric", instance_end(p.name), KV_FABRIC, f"KV out {window(p.name)} → {len(decodes)} Decode",
                side="out", source_window=list(windows.get(p.name, ())))
        for d in decodes:
            add("kv_fabric", KV_FABRIC, instance_end(d.name), f"KV in {window(d.name)} ← {len(prefills)} Prefill",
                side="in", target_window=list(windows.get(d.name, ())))
    for p in prefills if not mesh["aggregated"] else ():
        for d in decodes:
            add("kv_transfer", instance_end(p.name), instance_end(d.name), f"KV {window(p.name)} → {window(d.name)}",
                source_window=list(windows.get(p.name, ())), target_window=list(windows.get(d.name, ())))
    backend = spec.kv_pool.backend if spec.kv_pool else None
    if pool:
        what = POOL_NAMES.get(backend, "KV pool")
        for inst in spec.instances:
            add("kv_pool", instance_end(inst.name), process_end(pool.key),
                f"{what} :{pool.ports[0]} · {pool_mode(spec, inst.role)}", mode=pool_mode(spec, inst.role))
    elif stores:
        for inst in spec.instances:
            add("kv_pool", instance_end(inst.name), STORE_GROUP,
                f"memcached ring ({len(stores)}) · {pool_mode(spec, inst.role)}", mode=pool_mode(spec, inst.role))
    return edges
