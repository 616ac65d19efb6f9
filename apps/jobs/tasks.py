"""Celery tasks: thin wrappers over the runner and the sweep."""

from celery import shared_task
from celery.signals import worker_ready


@shared_task(acks_late=True, reject_on_worker_lost=False)
def run_job_task(job_id: int) -> None:
    from .runner import run_job

    run_job(job_id)


@shared_task
def sweep_orphaned_jobs_task() -> list[int]:
    from .services import sweep_orphaned_jobs

    return sweep_orphaned_jobs()


@worker_ready.connect
def sweep_jobs_of_dead_local_workers(**kwargs) -> None:
    from .services import sweep_orphaned_jobs

    sweep_orphaned_jobs(local_dead_only=True)
