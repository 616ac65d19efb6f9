"""Celery tasks: thin wrappers over the runner and the sweep. A worker sweeps at its start (jobs of dead workers on
this host) and then periodically itself (sweeper.py), so beat is not needed to end a dead worker's job."""

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown

_sweeper = None


@shared_task(acks_late=True, reject_on_worker_lost=False)
def run_job_task(job_id: int) -> None:
    from .runner import run_job

    run_job(job_id)


@shared_task
def sweep_orphaned_jobs_task() -> list[int]:
    from .services import requeue_lost_jobs, sweep_orphaned_jobs

    requeue_lost_jobs()
    return sweep_orphaned_jobs()


@worker_ready.connect
def sweep_jobs_of_dead_local_workers(**kwargs) -> None:
    global _sweeper
    from .services import sweep_orphaned_jobs
    from .sweeper import JobSweeper

    _sweeper = JobSweeper().start()
    sweep_orphaned_jobs(local_dead_only=True)


@worker_shutdown.connect
def stop_sweeping(**kwargs) -> None:
    if _sweeper is not None:
        _sweeper.stop()
