"""Job writes: create (then run after commit), record events, cancel, and the sweep of jobs whose worker vanished."""

import logging
import os
import socket
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_job_started
from apps.realtime.push import emit

from .broker import broker_run_id
from .choices import ALLOWED_TRANSITIONS, FINISHED, JobKind, JobStatus
from .models import Job, JobEvent
from .queues import job_queue
from .signals import job_ended, job_orphaned

logger = logging.getLogger(__name__)
QUEUE_SETTLE_SECONDS = 10  # a job younger than this may be in the middle of its first send


class JobStateError(Exception):
    pass


def job_create(*, kind: JobKind, target, user, params: dict | None = None, label: str | None = None) -> Job:
    """Creates a pending job and queues it once the transaction commits."""
    job = Job.objects.create(
        kind=kind, target_type=target._meta.label_lower, target_id=target.pk,
        target_label=label or str(target), params=params or {}, created_by=user,
    )
    audit_job_started(job, user)
    transaction.on_commit(lambda: job_send(job))
    return job


def job_send(job: Job, *, run_id: str | None = None) -> bool:
    """Queues the job's message and records which life of the broker holds it. A broker that is down leaves the job
    pending with nothing recorded; the sweep sends it once the broker answers (requeue_lost_jobs)."""
    from .tasks import run_job_task

    run_id = run_id or broker_run_id()
    try:
        run_job_task.apply_async((job.pk,), queue=job_queue(job.kind))
    except Exception as exc:  # kombu's OperationalError, a refused connection: the job stays pending, not lost
        logger.warning("job %s could not be queued now (%s); the sweep sends it when the broker answers", job.pk, exc)
        return False
    if run_id:
        Job.objects.filter(pk=job.pk).update(queued_on=run_id)
    return True


def requeue_lost_jobs(*, now=None) -> list[int]:
    """Sends again the pending jobs whose message the broker no longer holds: queued before a Redis restart, or
    never queued. A job is claimed once (pending -> running), so a message sent twice runs it once."""
    run_id = broker_run_id()
    if run_id is None:
        return []  # the broker is away: the next round
    settled = (now or timezone.now()) - timedelta(seconds=QUEUE_SETTLE_SECONDS)
    lost = Job.objects.filter(status=JobStatus.PENDING, created__lt=settled).exclude(queued_on=run_id)
    sent = [job.pk for job in lost if job_send(job, run_id=run_id)]
    if sent:
        logger.warning("jobs %s were queued again: the broker (run_id %s) did not hold their messages", sent, run_id)
    return sent


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def event_payload(event: JobEvent) -> dict:
    return {"type": "event", "counter": event.counter, "time": event.time.isoformat(), "node": event.node,
            "stream": event.stream, "text": event.text}


def status_payload(job: Job) -> dict:
    return {"type": "status", "status": job.status, "label": job.get_status_display(), "colour": job.colour,
            "explanation": job.explanation, "finished": job.finished.isoformat() if job.finished else None,
            "event_count": job.event_count}


def job_event_add(job: Job, counter: int, *, text: str, node: str = "", stream: str = "info") -> JobEvent:
    text = text.replace("\x00", "\\0")  # remote output may carry NULs, which PostgreSQL text refuses
    event = JobEvent.objects.create(job=job, counter=counter, node=node, stream=stream, text=text)
    transaction.on_commit(lambda: emit(f"job-{job.pk}", event_payload(event), throttle=True))
    return event


def job_transition(job: Job, new: JobStatus, *, explanation: str = "", **fields) -> bool:
    """Moves a job to `new` only from a state that allows it; returns False if someone else moved it first."""
    allowed_from = [old for old, targets in ALLOWED_TRANSITIONS.items() if new in targets]
    now = timezone.now()
    updates = {"status": new, **fields}
    if explanation:
        updates["explanation"] = explanation
    if new == JobStatus.RUNNING:
        updates.setdefault("started", now)
        updates.setdefault("heartbeat", now)
    if new in FINISHED:
        updates["finished"] = now
    changed = Job.objects.filter(pk=job.pk, status__in=allowed_from).update(**updates)
    job.refresh_from_db()
    if changed:
        transaction.on_commit(lambda: emit(f"job-{job.pk}", status_payload(job)))
        if new in FINISHED:
            transaction.on_commit(lambda: job_ended.send(sender=Job, job=job))
    return bool(changed)


def job_cancel(job: Job, *, user) -> Job:
    if job.is_finished:
        raise JobStateError(f"job #{job.pk} already ended ({job.get_status_display().lower()})")
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
    # Only a job no worker has claimed ends here; a running one sees the flag and stops itself.
    claimed = Job.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(
        status=JobStatus.CANCELED, finished=timezone.now(),
        explanation=f"canceled by {user.get_username()} before it started")
    job.refresh_from_db()
    if claimed:
        transaction.on_commit(lambda: emit(f"job-{job.pk}", status_payload(job)))
    return job


def sweep_orphaned_jobs(*, now=None, local_dead_only: bool = False) -> list[int]:
    """Marks failed the running jobs whose worker stopped beating its heart (or, at worker start, died here)."""
    now = now or timezone.now()
    swept = []
    host = socket.gethostname()
    stale_before = now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS)
    for job in Job.objects.filter(status=JobStatus.RUNNING):
        worker_host, _, pid = job.worker.partition(":")
        dead_here = worker_host == host and pid.isdecimal() and not _pid_alive(int(pid))
        stale = job.heartbeat is None or job.heartbeat < stale_before
        if dead_here or (stale and not local_dead_only):
            when = job.heartbeat.isoformat(timespec="seconds") if job.heartbeat else "never"
            why = (f"the worker running it ({job.worker or 'unknown'}) is gone (last heartbeat {when}); "
                   "processes it started may still run: check the node summaries and run stop if needed")
            if job_transition(job, JobStatus.FAILED, explanation=why):
                swept.append(job.pk)
                logger.warning("job %s marked failed: %s", job.pk, why)
                transaction.on_commit(lambda job=job: _tell_orphaned(job))
    return swept


def _tell_orphaned(job: Job) -> None:
    for receiver, error in job_orphaned.send_robust(sender=Job, job=job):
        if isinstance(error, Exception):
            logger.error("job %s: %r failed on its lost worker: %r", job.pk, receiver, error)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
