"""Status choices with their UI colour, in one place."""

from django.db import models


class Reachability(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"
    REACHABLE = "reachable", "Reachable"
    UNREACHABLE = "unreachable", "Unreachable"
    AUTH_FAILED = "auth_failed", "Authentication failed"
    HOST_KEY_MISMATCH = "host_key_mismatch", "Host key changed"
    NO_HOST_KEY = "no_host_key", "No pinned host key"


REACHABILITY_COLOUR = {
    Reachability.UNKNOWN: "grey",
    Reachability.REACHABLE: "green",
    Reachability.UNREACHABLE: "red",
    Reachability.AUTH_FAILED: "red",
    Reachability.HOST_KEY_MISMATCH: "red",
    Reachability.NO_HOST_KEY: "amber",
}


class NpuHealth(models.TextChoices):
    OK = "OK", "OK"
    WARNING = "Warning", "Warning"
    ALARM = "Alarm", "Alarm"
    CRITICAL = "Critical", "Critical"
    UNKNOWN = "Unknown", "Unknown"


NPU_HEALTH_COLOUR = {
    NpuHealth.OK: "green",
    NpuHealth.WARNING: "amber",
    NpuHealth.ALARM: "red",
    NpuHealth.CRITICAL: "red",
    NpuHealth.UNKNOWN: "grey",
}


class CredentialKind(models.TextChoices):
    PRIVATE_KEY = "private_key", "Private key"
    PASSWORD = "password", "Password"
