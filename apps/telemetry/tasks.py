"""Celery tasks of the telemetry queue: thin wrappers over the scrape services."""

from celery import shared_task

ROUND_EXPIRES_S = 5.0  # a deployment's round still queued when the next one is due is already stale


@shared_task(ignore_result=True)
def scrape_live_state_task() -> int:
    """Beat's round: one task per deployment on the telemetry queue, so every telemetry worker (on any host) takes a
    share; the per-deployment lock in services.deployment_scrape keeps two rounds of one deployment apart."""
    from .services import deployments_to_scrape

    ids = deployments_to_scrape()
    for deployment_id in ids:
        scrape_deployment_task.apply_async((deployment_id,), expires=ROUND_EXPIRES_S)
    return len(ids)


@shared_task(ignore_result=True)
def scrape_deployment_task(deployment_id: int) -> None:
    from .services import scrape_deployment

    scrape_deployment(deployment_id)


@shared_task(ignore_result=True)
def history_rollup_task() -> dict:
    from .history.rollup import rollup_and_clean

    return rollup_and_clean()
