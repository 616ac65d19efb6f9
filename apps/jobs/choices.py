"""Job kinds and the status machine, with labels and colours in one place."""

from django.db import models

from apps.coloured_choices import ColouredChoices


class JobKind(models.TextChoices):
    DISCOVER = "discover", "Discover NPUs"
    PREFLIGHT = "preflight", "Preflight"
    DEPLOY = "deploy", "Deploy"
    STOP = "stop", "Stop"
    RESTART = "restart", "Restart instance"
    ROLLING_RESTART = "rolling_restart", "Rolling restart"
    REFRESH = "refresh", "Read state from nodes"
    EVALUATE = "evaluate", "Evaluate"


class JobStatus(ColouredChoices):
    PENDING = "pending", "Pending", "grey"      # created, waiting for a worker
    RUNNING = "running", "Running", "blue"      # a worker owns it and beats its heart
    SUCCESSFUL = "successful", "Successful", "green"
    FAILED = "failed", "Failed", "red"          # the work ran and something it checks went wrong
    ERROR = "error", "Error", "red"             # the job machinery itself broke (bad input, a bug, a lost worker)
    CANCELED = "canceled", "Canceled", "amber"


FINISHED = frozenset({JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.ERROR, JobStatus.CANCELED})

ALLOWED_TRANSITIONS = {
    JobStatus.PENDING: {JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.ERROR, JobStatus.FAILED},
    JobStatus.RUNNING: {JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.ERROR, JobStatus.CANCELED},
}


class NodeStepState(ColouredChoices):
    WAITING = "waiting", "Waiting", "grey"
    RUNNING = "running", "Running", "blue"
    DONE = "done", "Done", "green"
    FAILED = "failed", "Failed", "red"
    SKIPPED = "skipped", "Skipped", "amber"
