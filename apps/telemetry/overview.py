"""Every deployment at a glance, for the home page: its active revision, instances healthy of total (the health
policy's states, or its processes' states before the policy has judged any), the proxy's req/s and the total KV
flow from the live state in Redis, how old that state is, and the job running on it.

A constant number of reads whatever the number of deployments: five queries and one Redis round trip.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.core.cache import cache

from apps.deployments.choices import ProcessState
from apps.deployments.models import Deployment, Process, Revision
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job

from .edge_ids import is_kv_edge
from .models import InstanceHealth, InstanceState
from .selectors import STALE_AFTER_S, live_key

ENGINE_ROLES = ("prefill", "decode")
# An instance's processes disagree: the worst of their states is the instance's.
PROCESS_WORST_FIRST = (ProcessState.FAILED, ProcessState.UNKNOWN, ProcessState.STOPPED, ProcessState.RUNNING)


@dataclass
class StateCount:
    state: str
    label: str
    colour: str
    count: int


@dataclass
class DeploymentOverview:
    deployment: Deployment
    revision: int | None
    served_model: str
    instances_total: int
    instances_good: int
    states: list[StateCount]
    source: str                 # "health" (the policy's states), "processes" (no health row yet) or "" (none)
    req_s: float | None = None
    kv_bytes_s: float | None = None
    live_age_s: float | None = None
    live_stale: bool = False
    job: Job | None = None
    evaluation: dict | None = field(default=None)  # filled by the page (apps/ui), which may read evals

    @property
    def all_good(self) -> bool:
        return self.instances_total > 0 and self.instances_good == self.instances_total

    @property
    def has_live(self) -> bool:
        return self.live_age_s is not None


def _instance_names(spec: dict) -> list[str]:
    try:
        return [i["name"] for i in spec.get("instances", ())]
    except (AttributeError, TypeError, KeyError):
        return []


def _health_states(names: list[str], rows: list[InstanceHealth]) -> list[str]:
    by_subject = {r.subject: r.state for r in rows}
    return [by_subject[n] for n in names if n in by_subject]


def _process_states(names: list[str], processes: list[Process]) -> list[str]:
    by_instance: dict[str, set[str]] = defaultdict(set)
    for p in processes:
        by_instance[p.instance].add(p.state)
    out = []
    for name in names:
        states = by_instance.get(name)
        if states:
            out.append(next(s for s in PROCESS_WORST_FIRST if s in states))
    return out


def _counts(states: list[str], source: str) -> list[StateCount]:
    choices = InstanceState if source == "health" else ProcessState
    counted = Counter(states)
    return [StateCount(c.value, c.label, c.colour, counted[c.value]) for c in choices if counted[c.value]]


def _live_figures(state: dict | None, now: float) -> dict:
    if not state:
        return {}
    proxy_keys = [t["key"] for t in state.get("targets", ()) if t.get("role") == "proxy"]
    services = state.get("services") or {}
    rates = [services[k].get("req_s") for k in proxy_keys if k in services]
    rates = [r for r in rates if r is not None]
    flows = [e.get("kv_bytes_s") for name, e in (state.get("edges") or {}).items() if is_kv_edge(name)]
    flows = [f for f in flows if f is not None]
    age = max(0.0, now - state.get("at", now))
    return {"req_s": sum(rates) if rates else None, "kv_bytes_s": sum(flows) if flows else None,
            "live_age_s": round(age, 1), "live_stale": age > STALE_AFTER_S}


def deployments_overview(*, now: float | None = None) -> list[DeploymentOverview]:
    """One row per deployment, in name order."""
    now = time.time() if now is None else now
    deployments = list(Deployment.objects.select_related("cluster").defer("proxy_admin_token").order_by("name"))
    if not deployments:
        return []
    ids = [d.pk for d in deployments]
    # values(): an audited model read with deferred fields would load each of them again to snapshot it
    revisions = {r["deployment_id"]: r for r in Revision.objects.filter(deployment_id__in=ids, is_active=True)
                 .values("deployment_id", "number", "served_model", "spec")}
    health: dict[int, list[InstanceHealth]] = defaultdict(list)
    for row in InstanceHealth.objects.filter(deployment_id__in=ids).only("deployment_id", "subject", "state"):
        health[row.deployment_id].append(row)
    processes: dict[int, list[Process]] = defaultdict(list)
    for p in Process.objects.filter(deployment_id__in=ids, role__in=ENGINE_ROLES).only(
            "deployment_id", "instance", "state"):
        processes[p.deployment_id].append(p)
    jobs: dict[int, Job] = {}
    for job in Job.objects.filter(target_type=Deployment._meta.label_lower, target_id__in=ids,
                                  status__in=(JobStatus.PENDING, JobStatus.RUNNING)).order_by("created", "id"):
        jobs.setdefault(job.target_id, job)  # the oldest unfinished one: the one that runs first
    keys = {live_key(pk): pk for pk in ids}
    live = {keys[k]: v for k, v in cache.get_many(list(keys)).items()}

    rows = []
    for d in deployments:
        revision = revisions.get(d.pk)
        names = _instance_names(revision["spec"]) if revision else []
        states, source = _health_states(names, health[d.pk]), "health"
        if not states:
            states, source = _process_states(names, processes[d.pk]), "processes"
        good = InstanceState.HEALTHY if source == "health" else ProcessState.RUNNING
        rows.append(DeploymentOverview(
            deployment=d, revision=revision["number"] if revision else None,
            served_model=revision["served_model"] if revision else "", instances_total=len(names),
            instances_good=sum(s == good for s in states), states=_counts(states, source),
            source=source if states else "", job=jobs.get(d.pk), **_live_figures(live.get(d.pk), now)))
    return rows
