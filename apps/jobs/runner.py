"""Runs one job: claims it, beats its heart, calls its handler, and ends it with a status that says why."""

import logging
import threading

from django.db import connections

from apps.audit.actor import acting_as

from .choices import JobStatus
from .context import JobCanceled, JobContext, JobFailed, reconnect_after
from .models import Job
from .registry import HANDLERS
from .services import job_transition, worker_identity

logger = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 2.0


def run_job(job_id: int) -> None:
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        logger.warning("job %s vanished before it ran", job_id)
        return
    if job.cancel_requested:
        Job.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(
            status=JobStatus.CANCELED, explanation="canceled before it started")
        return
    if not job_transition(job, JobStatus.RUNNING, worker=worker_identity()):
        logger.info("job %s is %s: not running it again", job_id, job.status)
        return
    handler = HANDLERS.get(job.kind)
    ctx = JobContext(job)
    if handler is None:
        job_transition(job, JobStatus.ERROR, explanation=f"no handler for job kind {job.kind!r} in this worker")
        return
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(ctx, stop), name=f"job-{job_id}-heartbeat", daemon=True)
    beat.start()
    try:
        with acting_as(job.created_by):
            handler(ctx)
    except JobCanceled:
        job_transition(job, JobStatus.CANCELED, explanation=ctx.job.params.get("cancel_note") or
                       "canceled by the operator; see the log for what was stopped")
        _last_words(ctx, "canceled: stopped at the operator's request")
    except JobFailed as exc:
        job_transition(job, JobStatus.FAILED, explanation=str(exc))
        _last_words(ctx, str(exc))
    except Exception as exc:  # a bug or a broken dependency: say so, keep the traceback in the worker log only
        logger.exception("job %s crashed", job_id)
        if reconnect_after(exc):
            why = f"the database connection failed mid-job ({str(exc).strip()[:200]}); the log says what was stopped"
        else:
            why = f"internal error ({type(exc).__name__}); see the worker log"
        job_transition(job, JobStatus.ERROR, explanation=why)
        _last_words(ctx, f"internal error: {type(exc).__name__}: {exc}")
    else:
        job_transition(job, JobStatus.SUCCESSFUL, explanation=ctx.summary or "done")
    finally:
        stop.set()
        beat.join(timeout=5)
        ctx.flush_event_count()


def _last_words(ctx: JobContext, text: str) -> None:
    try:
        ctx.log(text, stream="error")
    except Exception:
        logger.exception("job %s: could not record its last event", ctx.job.pk)


def _beat(ctx: JobContext, stop: threading.Event) -> None:
    try:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                ctx._poll_cancel_and_beat()
            except Exception as exc:  # one failed beat (database restart, lock) must not end the heartbeat
                logger.warning("job %s heartbeat failed, retrying: %s", ctx.job.pk, exc)
                connections.close_all()
    finally:
        connections.close_all()  # this thread's connections only: a finished job must not hold the database
