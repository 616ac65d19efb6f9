"""Eval choices with their labels and UI colours in one place."""

from django.db import models


class EvalMode(models.TextChoices):
    ACCURACY = "accuracy", "Accuracy"
    PERFORMANCE = "performance", "Performance"
    BOTH = "both", "Accuracy and performance"


class ApiStyle(models.TextChoices):
    CHAT = "chat", "Chat (/v1/chat/completions)"
    COMPLETIONS = "completions", "Completions (/v1/completions)"


class EvalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


EVAL_FINISHED = frozenset({EvalStatus.SUCCEEDED, EvalStatus.FAILED, EvalStatus.CANCELED})
EVAL_RESUMABLE = frozenset({EvalStatus.FAILED, EvalStatus.CANCELED})

EVAL_STATUS_COLOUR = {
    EvalStatus.PENDING: "grey",
    EvalStatus.RUNNING: "blue",
    EvalStatus.SUCCEEDED: "green",
    EvalStatus.FAILED: "red",
    EvalStatus.CANCELED: "amber",
}

# The modes one run executes, in order (a "both" run is an accuracy pass, then a performance pass).
PASSES = {
    EvalMode.ACCURACY: ("accuracy",),
    EvalMode.PERFORMANCE: ("performance",),
    EvalMode.BOTH: ("accuracy", "performance"),
}
