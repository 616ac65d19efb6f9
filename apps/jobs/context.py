"""What a job handler sees: events, per-node progress, the cancel flag, and typed failures."""

import threading
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError, close_old_connections
from django.utils import timezone

from .choices import NodeStepState
from .models import Job, JobNodeSummary
from .services import job_event_add


class JobFailed(Exception):
    """The work failed for a reason the operator can act on; the message becomes the job's explanation."""


class JobCanceled(Exception):
    pass


def reconnect_after(exc: BaseException) -> bool:
    """True when exc says the database connection itself failed (a database restart or failover, a terminated
    backend); this thread's broken connections are then dropped, so the next query (the cleanup, the job's last
    status) opens a new one instead of failing again."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    close_old_connections()
    return True


@dataclass
class NodeProgress:
    node: str
    steps_total: int


class JobContext:
    def __init__(self, job: Job):
        self.job = job
        self._lock = threading.Lock()
        self._counter = job.event_count
        self._cancel = threading.Event()
        self.summary = ""  # the explanation a successful job ends with

    # events -------------------------------------------------------------------------------------------
    def log(self, text: str, *, node: str = "", stream: str = "info") -> None:
        """One write per line (the event row); the job's event_count follows with the heartbeat and at the end."""
        with self._lock:
            self._counter += 1
            job_event_add(self.job, self._counter, text=text, node=node, stream=stream)

    def flush_event_count(self) -> None:
        Job.objects.filter(pk=self.job.pk).update(event_count=self._counter)

    def step(self, text: str, *, node: str = "") -> None:
        self.log(text, node=node, stream="step")

    def output_sink(self, node: str):
        """A callback for the SSH executor that streams a command's lines into events."""

        def sink(stream: str, text: str) -> None:
            for line in text.splitlines() or [""]:
                self.log(line, node=node, stream=stream)

        return sink

    # per-node progress --------------------------------------------------------------------------------
    def nodes_planned(self, steps_per_node: dict[str, int]) -> None:
        for node, total in steps_per_node.items():
            JobNodeSummary.objects.update_or_create(job=self.job, node=node, defaults={"steps_total": total})

    def node_state(self, node: str, state: NodeStepState, message: str = "", *, step_done: bool = False) -> None:
        with self._lock:
            summary, _ = JobNodeSummary.objects.get_or_create(job=self.job, node=node)
            summary.state = state
            if message:
                summary.message = message
            if step_done:
                summary.steps_done = min(summary.steps_done + 1, max(summary.steps_total, summary.steps_done + 1))
            summary.save()
        from apps.realtime.push import emit

        emit(f"job-{self.job.pk}", {"type": "node", "node": node, "state": summary.state,
                                    "colour": summary.colour, "percent": summary.percent,
                                    "steps_done": summary.steps_done, "steps_total": summary.steps_total,
                                    "message": summary.message})

    # cancel -------------------------------------------------------------------------------------------
    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def check_cancel(self) -> None:
        if self._cancel.is_set():
            raise JobCanceled()

    def _poll_cancel_and_beat(self) -> None:
        close_old_connections()
        Job.objects.filter(pk=self.job.pk).update(heartbeat=timezone.now(), event_count=self._counter)
        if Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists():
            self._cancel.set()
