"""Deployment and process states, each with its label and UI colour in one place."""

from django.db import models


class ProcessState(models.TextChoices):
    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"      # died on its own, or never became healthy
    UNKNOWN = "unknown", "Unknown"   # its node could not be asked (unreachable, job lost)


PROCESS_STATE_COLOUR = {
    ProcessState.RUNNING: "green",
    ProcessState.STOPPED: "grey",
    ProcessState.FAILED: "red",
    ProcessState.UNKNOWN: "amber",
}

# Stage order of a plan; stop and reconcile walk it backwards.
ROLE_ORDER = ("store", "kv_pool", "prefill", "decode", "proxy")
ROLE_COLOUR = {"store": "purple", "kv_pool": "purple", "prefill": "blue", "decode": "green", "proxy": "amber"}
