"""Celery tasks of the telemetry queue: thin wrappers over the scrape services."""

from celery import shared_task


@shared_task(ignore_result=True)
def scrape_live_state_task() -> int:
    from .services import scrape_running_deployments

    return len(scrape_running_deployments())


@shared_task(ignore_result=True)
def poll_npus_task() -> int:
    """`npu-smi info` over SSH on every polled node (apps/inventory/npu_polling.py); returns the rows refreshed."""
    from apps.inventory.npu_polling import npu_poll_round

    return npu_poll_round().refreshed_rows
