"""Job kinds and the status machine, with labels and colours in one place."""

from django.db import models


class JobKind(models.TextChoices):
    DISCOVER = "discover", "Discover NPUs"
    PREFLIGHT = "preflight", "Preflight"
    DEPLOY = "deploy", "Deploy"
    STOP = "stop", "Stop"
    RESTART = "restart", "Restart instance"
    ROLLING_RESTART = "rolling_restart", "Rolling restart"
    REFRESH = "refresh", "Read state from nodes"
    EVALUATE = "evaluate", "Evaluate"


class JobStatus(models.TextChoices):
    PENDING = "pending", "Pending"          # created, waiting for a worker
    RUNNING = "running", "Running"          # a worker owns it and beats its heart
    SUCCESSFUL = "successful", "Successful"
    FAILED = "failed", "Failed"             # the work ran and something it checks went wrong
    ERROR = "error", "Error"                # the job machinery itself broke (bad input, a bug, a lost worker)
    CANCELED = "canceled", "Canceled"


FINISHED = frozenset({JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.ERROR, JobStatus.CANCELED})

ALLOWED_TRANSITIONS = {
    JobStatus.PENDING: {JobStatus.RUNNING, JobStatus.CANCELED, JobStatus.ERROR, JobStatus.FAILED},
    JobStatus.RUNNING: {JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.ERROR, JobStatus.CANCELED},
}

JOB_STATUS_COLOUR = {
    JobStatus.PENDING: "grey",
    JobStatus.RUNNING: "blue",
    JobStatus.SUCCESSFUL: "green",
    JobStatus.FAILED: "red",
    JobStatus.ERROR: "red",
    JobStatus.CANCELED: "amber",
}


class NodeStepState(models.TextChoices):
    WAITING = "waiting", "Waiting"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


NODE_STEP_COLOUR = {
    NodeStepState.WAITING: "grey",
    NodeStepState.RUNNING: "blue",
    NodeStepState.DONE: "green",
    NodeStepState.FAILED: "red",
    NodeStepState.SKIPPED: "amber",
}
