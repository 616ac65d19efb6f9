"""Celery tasks of the telemetry queue: thin wrappers over the scrape services."""

from celery import shared_task


@shared_task(ignore_result=True)
def scrape_live_state_task() -> int:
    from .services import scrape_running_deployments

    return len(scrape_running_deployments())

