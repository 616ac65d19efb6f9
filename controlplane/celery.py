"""The Celery app: tasks stay thin and call services; queues by kind (ssh, telemetry, evals). Every worker keeps
its entry in the worker registry (apps/jobs/workers.py) fresh while it runs, so a pending job can tell whether any
worker consumes its queue."""

import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_beacon = None


@worker_ready.connect
def announce_worker(sender=None, **kwargs) -> None:
    """worker_ready fires once the consumer listens (with --without-gossip/--without-mingle and any pool too)."""
    global _beacon
    from apps.jobs.workers import WorkerBeacon

    queues = [q.name for q in sender.task_consumer.queues] if getattr(sender, "task_consumer", None) else \
        list(sender.app.amqp.queues.consume_from)
    _beacon = WorkerBeacon(f"{sender.hostname}:{os.getpid()}", queues).start()


@worker_shutdown.connect
def withdraw_worker(**kwargs) -> None:
    if _beacon is not None:
        _beacon.stop()
