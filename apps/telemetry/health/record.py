"""One health round of a deployment against the database: read its processes, the kept states, the policy and the
restart jobs; probe the health URLs; let machine.decide; write what changed (states, events, audit entries) and
start the auto-restarts it asks for. A constant number of queries, plus one write per changed subject."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

from django.db import transaction

from apps.audit.models import AuditAction
from apps.audit.services import audit_record
from apps.deployments.choices import ProcessState
from apps.deployments.job_params import JobParams
from apps.deployments.models import Deployment, Process, Revision
from apps.deployments.services import deployment_restart
from apps.deployments.topology import get_profile
from apps.jobs.models import Job

from ..models import HealthEvent, HealthPolicy, InstanceHealth, InstanceState
from .machine import BUSY_PREFIX, Decision, Memory, Policy, ProcessSeen, decide, held_by_busy
from .probe import probe, probe_all

ENGINE_ROLES = ("prefill", "decode")
# A process counts as starting, not unhealthy, until it first answers, for as long as a deploy's health gate waits.
STARTUP_GRACE_S = JobParams.health_timeout
PROCESS_FIELDS = ("key", "role", "instance", "state", "state_detail", "started_at", "health_url")


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


def _dt(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def subjects_of(rows: list[Process]) -> dict[str, tuple[bool, list[Process]]]:
    """subject -> (restartable, its processes): engines by instance, every other process by its key."""
    out: dict[str, tuple[bool, list[Process]]] = defaultdict(lambda: (False, []))
    for p in rows:
        engine = p.role in ENGINE_ROLES and bool(p.instance)
        subject = p.instance if engine else p.key
        out[subject] = (engine, [*out[subject][1], p])
    return dict(out)


def policy_of(deployment: Deployment) -> Policy:
    row = HealthPolicy.objects.filter(deployment=deployment).first()
    if row is None:
        return Policy()
    return Policy(auto_restart=row.auto_restart, unhealthy_rounds=row.unhealthy_rounds, backoff_s=row.backoff_s,
                  max_restarts=row.max_restarts)


def _memory(row: InstanceHealth | None, jobs: dict[int, Job]) -> Memory:
    if row is None:
        return Memory()
    job = jobs.get(row.restart_job_id)
    return Memory(state=row.state, reason=row.reason, since=_epoch(row.since), bad_rounds=row.bad_rounds,
                  restarts=row.restarts, last_restart_at=_epoch(row.last_restart_at), restart_job=row.restart_job_id,
                  restart_job_status=job.status if job else None, restart_job_explanation=job.explanation if job else "")


def _seen(p: Process, answers: dict, readings: dict) -> ProcessSeen:
    healthy, why = answers.get(p.key, (None, ""))
    reading = readings.get(p.key)
    return ProcessSeen(key=p.key, state=p.state, started_at=_epoch(p.started_at), health=healthy, health_reason=why,
                       metrics=reading.status if reading else None, metrics_reason=reading.reason if reading else "",
                       detail=p.state_detail)


def startup_grace_s(deployment: Deployment) -> int:
    """STARTUP_GRACE_S, or the active revision's profile's floor when larger, as the deploy's health gate waits (a
    real CPU engine, launch_profile vllm-cpu, takes minutes to answer on a loaded machine)."""
    profile = (Revision.objects.filter(deployment=deployment, is_active=True)
               .values_list("launch_profile", flat=True).first())
    try:
        return max(STARTUP_GRACE_S, get_profile(profile).min_health_timeout)
    except KeyError:  # no active revision
        return STARTUP_GRACE_S


def health_round(deployment: Deployment, readings: list, *, now: float, prober=None) -> dict:
    rows = list(Process.objects.filter(deployment=deployment).only(*PROCESS_FIELDS))
    kept = {h.subject: h for h in InstanceHealth.objects.filter(deployment=deployment)}
    subjects = {s: v for s, v in subjects_of(rows).items()
                if s in kept or any(p.state != ProcessState.STOPPED for p in v[1])}  # never started: nothing to say
    policy = policy_of(deployment)
    grace_s = startup_grace_s(deployment)
    job_ids = [h.restart_job_id for h in kept.values() if h.restart_job_id]
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=job_ids).only("pk", "status", "explanation")} if job_ids else {}
    urls = {p.key: p.health_url for _, procs in subjects.values() for p in procs
            if p.health_url and p.state in (ProcessState.RUNNING, ProcessState.UNKNOWN)}
    answers = probe_all(urls, fetch=prober or probe)
    by_key = {r.key: r for r in readings}
    section = {}
    with transaction.atomic():
        for subject, (restartable, procs) in sorted(subjects.items()):
            row, prev = kept.get(subject), _memory(kept.get(subject), jobs)
            decision = decide(prev, [_seen(p, answers, by_key) for p in procs], policy, now=now,
                              grace_s=grace_s, restartable=restartable)
            job = None
            if decision.restart:
                decision, job = _start_restart(deployment, subject, decision, prev)
            _save(deployment, subject, row, decision, job, now=now)
            section[subject] = health_view(decision, auto_restart=policy.auto_restart and restartable,
                                           kind="instance" if restartable else "service")
    return section


def _start_restart(deployment, subject: str, decision: Decision, prev: Memory) -> tuple[Decision, Job | None]:
    try:
        job = deployment_restart(deployment=deployment, user=None, instance=subject)
    except Exception as exc:  # DeploymentBusy above all; a revision that no longer plans, bad params: wait too
        last = HealthEvent.objects.filter(deployment=deployment, subject=subject).only("reason").first()
        said = last is not None and last.reason.startswith(BUSY_PREFIX)
        return held_by_busy(decision, prev, str(exc) or type(exc).__name__, already_said=said), None
    decision.memory = replace(decision.memory, restart_job=job.pk, restart_job_status=job.status)
    return decision, job


def _save(deployment, subject: str, row: InstanceHealth | None, decision: Decision, job: Job | None, *,
          now: float) -> None:
    m = decision.memory
    values = {"state": m.state, "reason": m.reason, "since": _dt(m.since), "bad_rounds": m.bad_rounds,
              "restarts": m.restarts, "last_restart_at": _dt(m.last_restart_at)}
    if job is not None:
        values["restart_job_id"] = job.pk
    if row is None:
        InstanceHealth.objects.create(deployment=deployment, subject=subject, **values)
    elif any(getattr(row, k) != v for k, v in values.items()):
        InstanceHealth.objects.filter(pk=row.pk).update(**values)
    at = _dt(now)
    HealthEvent.objects.bulk_create(
        HealthEvent(deployment=deployment, subject=subject, at=at, from_state=e.from_state, to_state=e.to_state,
                    reason=e.reason, job=job if e.restart else None) for e in decision.events)
    for e in decision.events:
        if e.from_state != e.to_state:
            audit_record(action=AuditAction.HEALTH, instance=deployment, object_repr=f"{deployment.name}/{subject}",
                         changes={"state": [e.from_state or None, e.to_state], "reason": [None, e.reason]},
                         user=None)


def health_view(decision: Decision, *, auto_restart: bool, kind: str) -> dict:
    m = decision.memory
    return {"state": m.state, "label": InstanceState(m.state).label, "colour": InstanceState(m.state).colour,
            "reason": m.reason, "since": m.since, "kind": kind, "bad_rounds": m.bad_rounds, "restarts": m.restarts,
            "restart_job": m.restart_job, "auto_restart": auto_restart, "next_restart_at": decision.next_restart_at}
