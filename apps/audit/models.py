"""Audit trail: who created, changed or deleted what, and who started which job."""

from django.conf import settings
from django.db import models

from apps.coloured_choices import ColouredChoices


class AuditAction(ColouredChoices):
    CREATE = "create", "Created", "green"
    UPDATE = "update", "Changed", "blue"
    DELETE = "delete", "Deleted", "red"
    JOB = "job", "Started job", "purple"
    LOGIN = "login", "Logged in", "grey"
    HEALTH = "health", "Health changed", "amber"  # an instance's health state moved (by the system: user None)
    PLAYGROUND = "playground", "Sent a playground request", "blue"  # token counts, P and D; never the text


class AuditEntry(models.Model):
    time = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    username = models.CharField(max_length=150, help_text="Kept when the user is deleted.")
    action = models.CharField(max_length=10, choices=AuditAction.choices)
    object_type = models.CharField(max_length=100, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200)
    changes = models.JSONField(default=dict, blank=True, help_text="field: [before, after]; secrets masked")

    class Meta:
        ordering = ["-time", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self):
        return f"{self.username} {self.get_action_display().lower()} {self.object_type} {self.object_repr}"

    @property
    def colour(self) -> str:
        return AuditAction.colour_of(self.action)
