"""Why a pending job has not started: how long it has waited, its queue, and how many live workers consume it
(apps/jobs/workers.py), with what to do when none does."""

from django.utils import timezone

from .choices import JobStatus
from .models import Job
from .queues import DEFAULT_QUEUE_KIND, QUEUE_OF_KIND, job_queue
from .workers import LiveWorker, RegistryUnavailable, live_workers


def job_waiting(job: Job, workers: list[LiveWorker] | None = None) -> dict | None:
    """None unless the job is pending. `workers` is null when the registry cannot be read (Redis down)."""
    if job.status != JobStatus.PENDING:
        return None
    queue = job_queue(job.kind)
    kind = QUEUE_OF_KIND.get(job.kind, DEFAULT_QUEUE_KIND)
    pending_s = round((timezone.now() - job.created).total_seconds(), 1)
    if workers is None:
        try:
            workers = live_workers()
        except RegistryUnavailable:
            return {"pending_s": pending_s, "queue": queue, "workers": None,
                    "message": f"pending for {pending_s:.0f} s; the worker registry cannot be read (is Redis up?)"}
    count = sum(1 for w in workers if queue in w.queues)
    if count:
        message = (f"pending for {pending_s:.0f} s; {count} live worker{'s' if count != 1 else ''} consume"
                   f"{'s' if count == 1 else ''} queue {queue}: it starts when one is free")
    else:
        message = (f"pending for {pending_s:.0f} s: no worker consumes queue {queue}: start one with "
                   f"`celery -A controlplane worker -Q \"$(python manage.py celery_queues {kind})\"`")
    return {"pending_s": pending_s, "queue": queue, "workers": count, "message": message}
