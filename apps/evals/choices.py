"""Eval choices with their labels and UI colours in one place."""

from django.db import models

from apps.coloured_choices import ColouredChoices


class EvalMode(models.TextChoices):
    ACCURACY = "accuracy", "Accuracy"
    PERFORMANCE = "performance", "Performance"
    BOTH = "both", "Accuracy and performance"


class ApiStyle(models.TextChoices):
    CHAT = "chat", "Chat (/v1/chat/completions)"
    COMPLETIONS = "completions", "Completions (/v1/completions)"


class EvalSource(models.TextChoices):
    RAN = "ran", "Ran here"
    IMPORTED = "imported", "Imported"


class EvalStatus(ColouredChoices):
    PENDING = "pending", "Pending", "grey"
    RUNNING = "running", "Running", "blue"
    SUCCEEDED = "succeeded", "Succeeded", "green"
    FAILED = "failed", "Failed", "red"
    CANCELED = "canceled", "Canceled", "amber"


EVAL_FINISHED = frozenset({EvalStatus.SUCCEEDED, EvalStatus.FAILED, EvalStatus.CANCELED})
EVAL_RESUMABLE = frozenset({EvalStatus.FAILED, EvalStatus.CANCELED})


# The modes one run executes, in order (a "both" run is an accuracy pass, then a performance pass).
PASSES = {
    EvalMode.ACCURACY: ("accuracy",),
    EvalMode.PERFORMANCE: ("performance",),
    EvalMode.BOTH: ("accuracy", "performance"),
}
