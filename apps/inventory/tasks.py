"""Celery tasks of the inventory (run on the telemetry queue): thin wrappers over its services."""

from celery import shared_task


@shared_task(ignore_result=True)
def poll_npus_task() -> int:
    """`npu-smi info` over SSH on every polled node (apps/inventory/npu_polling.py); returns the rows refreshed."""
    from .npu_polling import npu_poll_round

    return npu_poll_round().refreshed_rows
