"""Job records: one row per job, an event row per line or step (monotonic counter), a summary per node."""

from django.conf import settings
from django.db import models

from .choices import FINISHED, JobKind, JobStatus, NodeStepState


class Job(models.Model):
    kind = models.CharField(max_length=20, choices=JobKind.choices)
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.PENDING, db_index=True)
    target_type = models.CharField(max_length=40, help_text="What the job acts on, e.g. inventory.node")
    target_id = models.PositiveBigIntegerField()
    target_label = models.CharField(max_length=200)
    params = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    explanation = models.TextField(blank=True, help_text="Why the job ended as it did, in one or two sentences.")
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid of the worker that runs it")
    heartbeat = models.DateTimeField(null=True, blank=True)
    event_count = models.PositiveIntegerField(default=0)
    queued_on = models.CharField(max_length=40, blank=True,
                                 help_text="run_id of the Redis broker its message went to; empty: not sent yet")

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self):
        return f"#{self.pk} {self.get_kind_display()} {self.target_label}"

    @property
    def colour(self) -> str:
        return JobStatus.colour_of(self.status)

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def duration_seconds(self) -> float | None:
        if not self.started:
            return None
        from django.utils import timezone

        return ((self.finished or timezone.now()) - self.started).total_seconds()


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    counter = models.PositiveIntegerField()
    time = models.DateTimeField(auto_now_add=True)
    node = models.CharField(max_length=63, blank=True)
    stream = models.CharField(max_length=10, default="info", help_text="info, step, stdout, stderr, error")
    text = models.TextField()

    class Meta:
        ordering = ["job", "counter"]
        constraints = [models.UniqueConstraint(fields=["job", "counter"], name="job_event_counter_unique")]


class JobNodeSummary(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="node_summaries")
    node = models.CharField(max_length=63)
    state = models.CharField(max_length=10, choices=NodeStepState.choices, default=NodeStepState.WAITING)
    steps_done = models.PositiveIntegerField(default=0)
    steps_total = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["job", "node"]
        constraints = [models.UniqueConstraint(fields=["job", "node"], name="job_node_summary_unique")]

    @property
    def colour(self) -> str:
        return NodeStepState.colour_of(self.state)

    @property
    def percent(self) -> int:
        return int(100 * self.steps_done / self.steps_total) if self.steps_total else 0
