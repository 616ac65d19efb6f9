"""Celery tasks of the telemetry queue: thin wrappers over the scrape services."""

from celery import shared_task


@shared_task(ignore_result=True)
def scrape_live_state_task() -> int:
    from .services import scrape_running_deployments

    return len(scrape_running_deployments())


@shared_task(ignore_result=True)
def history_rollup_task() -> dict:
    from .history.rollup import rollup_and_clean

    return rollup_and_clean()
