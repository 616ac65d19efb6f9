"""The instance page's read model: one Prefill or Decode instance of a deployment's active revision as planned (role,
nodes, dies, its processes with their last known state), its health with the transitions that led there, and the
history charts it draws; and the charts the deployment page draws for the proxy and the pool."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Q

from apps.deployments.choices import ProcessRole
from apps.deployments.models import Deployment, Process
from apps.deployments.revision_checks import RevisionInvalid
from apps.deployments.revision_plan import deployment_plan, revision_spec
from apps.deployments.topology import InstanceSpec, PlannedProcess, SpecError

from .history.selectors import process_subjects
from .models import HealthEvent, InstanceHealth, InstanceState, MetricPoint
from .topology_snapshot import ENGINE_ROLES

EVENTS_SHOWN = 50


class InstanceNotFound(Exception):
    pass


def _chart(chart_id: str, title: str, subject: str, unit: str, *fields: tuple[str, str]) -> dict:
    """What static/js/history-charts.js draws: one plot of some fields of one history subject, in one unit
    (percent, seconds, bytes, bytes/s, tok/s, req/s, count)."""
    return {"id": chart_id, "title": title, "subject": subject, "unit": unit,
            "fields": [{"field": f, "label": label} for f, label in fields]}


def instance_charts(name: str) -> list[dict]:
    subject = f"inst:{name}"
    return [
        _chart("kv-usage", "KV cache used", subject, "percent", ("kv_usage", "KV cache")),
        _chart("requests", "Requests running and waiting", subject, "count",
               ("running", "running"), ("waiting", "waiting")),
        _chart("tokens", "Tokens per second", subject, "tok/s",
               ("prompt_tok_s", "prompt"), ("gen_tok_s", "generation")),
        _chart("ttft", "Time to first token", subject, "seconds", ("ttft_p50_s", "p50"), ("ttft_p99_s", "p99")),
        _chart("itl", "Inter-token latency", subject, "seconds", ("itl_p50_s", "p50"), ("itl_p99_s", "p99")),
        _chart("kv-bytes", "KV bytes per second", subject, "bytes/s",
               ("kv_in_bytes_s", "in"), ("kv_out_bytes_s", "out")),
        _chart("hit-rates", "Hit rates", subject, "percent",
               ("prefix_hit_rate", "prefix cache"), ("connector_hit_rate", "KV connector (pool)")),
    ]


SERVICE_CHARTS = [
    _chart("proxy-requests", "Proxy: requests per second", "proxy", "req/s", ("req_s", "requests")),
    _chart("proxy-inflight", "Proxy: requests in flight", "proxy", "count", ("inflight", "in flight")),
    _chart("proxy-ttft", "Proxy: time to first token", "proxy", "seconds", ("ttft_s", "TTFT")),
    _chart("pool-hits", "Pool: hit rate", "pool", "percent", ("hit_rate", "hit rate")),
    _chart("pool-hit-tokens", "Pool: tokens found per second", "pool", "tok/s", ("hit_tok_s", "hit tokens")),
    _chart("pool-keys", "Pool: keys", "kv-pool", "count", ("key_count", "keys")),
    _chart("pool-memory", "Pool: memory", "kv-pool", "bytes",
           ("allocated_bytes", "allocated"), ("total_bytes", "capacity")),
    _chart("pool-latency", "Pool: operation latency", "kv-pool", "seconds",
           ("lookup_s", "lookup"), ("load_s", "load"), ("put_s", "put")),
]


@dataclass
class InstancePage:
    deployment: Deployment
    name: str
    problem: str = ""  # why nothing can be shown (no active revision, a spec that no longer parses)
    plan_problems: list[str] = field(default_factory=list)  # shown, but the instance is still drawn from its spec
    instance: InstanceSpec | None = None
    nodes: list[dict] = field(default_factory=list)  # [{node, dies}] in span order
    processes: list[dict] = field(default_factory=list)
    health: dict | None = None
    events: list[dict] = field(default_factory=list)  # newest first, at most EVENTS_SHOWN
    event_count: int = 0
    charts: list[dict] = field(default_factory=list)

    @property
    def role_colour(self) -> str:
        return ProcessRole.colour_of(self.instance.role if self.instance else None)

    @property
    def first_process(self) -> Process | None:
        """The process whose log the page shows: the first planned one that was started."""
        return next((p["row"] for p in self.processes if p["row"] is not None), None)


def instance_page(deployment: Deployment, name: str) -> InstancePage:
    """The page of instance `name`; InstanceNotFound when the active revision has no such instance."""
    page = InstancePage(deployment=deployment, name=name)
    revision = deployment.active_revision
    if revision is None:
        page.problem = "This deployment has no active revision: save a spec and activate it to see its instances."
        return page
    planned: list[PlannedProcess] = []
    try:
        spec, plan = deployment_plan(deployment, revision)
        planned = [p for p in plan.processes if p.instance == name and p.role in ENGINE_ROLES]
    except RevisionInvalid as exc:
        page.plan_problems = [str(p) for p in exc.problems]
        spec = exc.spec
    except SpecError as exc:
        page.problem = f"The active revision r{revision.number} no longer parses: {exc}"
        return page
    if spec is None:  # invalid before it could be parsed: read the stored spec for the instance facts
        try:
            spec = revision_spec(revision)
        except SpecError as exc:
            page.problem = f"The active revision r{revision.number} no longer parses: {exc}"
            return page
    page.instance = next((i for i in spec.instances if i.name == name), None)
    if page.instance is None:
        raise InstanceNotFound(f"r{revision.number} of {deployment.name} has no instance {name!r}")
    page.processes = _processes(deployment, name, planned)
    page.nodes = _nodes(page.instance, page.processes)
    page.health = _health(deployment, name)
    events = HealthEvent.objects.filter(deployment=deployment, subject=name)
    page.event_count = events.count()
    page.events = [_event(e) for e in events[:EVENTS_SHOWN]]
    page.charts = charts_with_history(deployment, instance_charts(name))
    return page


def charts_with_history(deployment: Deployment, charts: list[dict]) -> list[dict]:
    """The charts, each saying whether its subject has any history or a process that will make some (else the page
    says so without asking the API, which refuses a subject it cannot know)."""
    wanted = {c["subject"] for c in charts}
    kept = set(MetricPoint.objects.filter(deployment=deployment, subject__in=wanted)
               .values_list("subject", flat=True).distinct()) | process_subjects(deployment, wanted)
    return [{**c, "has_history": c["subject"] in kept} for c in charts]


def _devices(p: PlannedProcess) -> list[int]:
    text = p.launch.env.get("ASCEND_RT_VISIBLE_DEVICES", "")
    return [int(d) for d in text.split(",") if d.strip().isdecimal()]


def _processes(deployment: Deployment, name: str, planned: list[PlannedProcess]) -> list[dict]:
    """The planned processes with their rows, then rows of the instance the plan no longer has (an old revision's)."""
    keys = [p.key for p in planned]
    rows = {r.key: r for r in Process.objects.filter(deployment=deployment)
            .filter(Q(key__in=keys) | Q(instance=name)).select_related("revision", "node__credential")}
    out = [{"key": p.key, "node": p.node, "address": p.address, "dp_rank": p.dp_rank, "ports": list(p.ports),
            "devices": _devices(p), "planned": True, "row": rows.get(p.key)} for p in planned]
    out += [{"key": r.key, "node": r.node_name, "address": r.address, "dp_rank": None, "ports": r.ports,
             "devices": [], "planned": False, "row": r} for key, r in sorted(rows.items()) if key not in keys]
    return out


def _nodes(inst: InstanceSpec, processes: list[dict]) -> list[dict]:
    dies: dict[str, set[int]] = defaultdict(set)
    for p in processes:
        dies[p["node"]].update(p["devices"])
    return [{"node": node, "dies": sorted(dies[node])} for node in inst.span]


def _state(state: str) -> dict:
    return {"state": state, "label": InstanceState(state).label if state in InstanceState.values else state,
            "colour": InstanceState.colour_of(state)}


def _event(e: HealthEvent) -> dict:
    return {"at": e.at, "from": _state(e.from_state) if e.from_state else None, "to": _state(e.to_state),
            "reason": e.reason, "job_id": e.job_id}


def _health(deployment: Deployment, name: str) -> dict | None:
    row = InstanceHealth.objects.filter(deployment=deployment, subject=name).first()
    if row is None:
        return None
    return {**_state(row.state), "since": row.since, "reason": row.reason, "restarts": row.restarts,
            "last_restart_at": row.last_restart_at}
