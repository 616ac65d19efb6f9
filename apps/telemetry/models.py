"""What telemetry keeps in the database: the history of the scrape rounds (downsampled by tier), each instance's
health as the policy derives it with every transition as an event, and a deployment's health policy
(auto-restart). Live state itself stays in Redis (selectors.py): it is rewritten every round."""

from django.db import models

from apps.audit.registry import audited
from apps.coloured_choices import ColouredChoices
from apps.deployments.models import Deployment


class HistoryTier(models.TextChoices):
    """Resolution of a history point. A raw point is one scrape round; the others are rollups of the tier below."""

    RAW = "raw", "one scrape round"
    MINUTE = "1m", "1 minute"
    TEN_MINUTES = "10m", "10 minutes"


class MetricPoint(models.Model):
    """One subject's numbers at one time. `subject` is `inst:<name>` for an instance, or the key of a service
    process (`proxy`, `kv-pool`); `values` holds the plotted fields (None = not measured then)."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="+")
    tier = models.CharField(max_length=3, choices=HistoryTier.choices)
    at = models.DateTimeField(help_text="The round's time (raw) or the bucket's start (rollups).")
    subject = models.CharField(max_length=80)
    values = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["deployment", "tier", "subject", "at"], name="metricpoint_series"),
                   models.Index(fields=["tier", "at"], name="metricpoint_retention")]


class InstanceState(ColouredChoices):
    STARTING = "starting", "Starting", "blue"
    HEALTHY = "healthy", "Healthy", "green"
    DEGRADED = "degraded", "Degraded", "amber"
    UNHEALTHY = "unhealthy", "Unhealthy", "red"
    STOPPED = "stopped", "Stopped", "grey"
    FAILED = "failed", "Failed", "red"


class InstanceHealth(models.Model):
    """The current state of one instance (engines) or service process (proxy, kv-pool) of a deployment."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=80, help_text="An instance name (p0) or a service process key (proxy).")
    state = models.CharField(max_length=10, choices=InstanceState.choices)
    reason = models.TextField(blank=True)
    since = models.DateTimeField()
    bad_rounds = models.PositiveIntegerField(default=0, help_text="Rounds in a row it was unhealthy.")
    restarts = models.PositiveIntegerField(default=0, help_text="Auto-restarts since it was last healthy.")
    last_restart_at = models.DateTimeField(null=True, blank=True)
    restart_job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["deployment", "subject"], name="instancehealth_unique")]

    @property
    def colour(self) -> str:
        return InstanceState.colour_of(self.state)


class HealthEvent(models.Model):
    """One transition of an instance's state, or an auto-restart decision, with its time and reason."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=80)
    at = models.DateTimeField()
    from_state = models.CharField(max_length=10, choices=InstanceState.choices, blank=True)
    to_state = models.CharField(max_length=10, choices=InstanceState.choices)
    reason = models.TextField(blank=True)
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                            help_text="The restart job an auto-restart started.")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["deployment", "subject", "at"], name="healthevent_subject")]


@audited()
class HealthPolicy(models.Model):
    """Per deployment: whether an unhealthy instance is restarted by itself, after how many bad rounds, how often
    (backoff doubling from backoff_s), and at most how many times before it is left failed."""

    deployment = models.OneToOneField(Deployment, on_delete=models.CASCADE, related_name="health_policy")
    auto_restart = models.BooleanField(default=False)
    unhealthy_rounds = models.PositiveSmallIntegerField(
        default=3, help_text="Rounds in a row an instance must be unhealthy before it is restarted.")
    backoff_s = models.PositiveIntegerField(default=30, help_text="Wait after a restart before the next; doubles.")
    max_restarts = models.PositiveSmallIntegerField(
        default=3, help_text="Restarts without becoming healthy in between before the instance is left failed.")
    updated = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"health policy of {self.deployment}"
