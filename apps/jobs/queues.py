"""Which Celery queue runs a job, by its kind: evaluations on their own queue (long, CPU-heavy client runs), every
other job over SSH. Queue names come from settings.PDCP_QUEUES (namespaced per installation)."""

from django.conf import settings

from .choices import JobKind

QUEUE_OF_KIND = {JobKind.EVALUATE: "evals"}
DEFAULT_QUEUE_KIND = "ssh"


def queue_kinds() -> tuple[str, ...]:
    return tuple(settings.PDCP_QUEUES)


def job_queue(kind: str) -> str:
    return settings.PDCP_QUEUES[QUEUE_OF_KIND.get(kind, DEFAULT_QUEUE_KIND)]
