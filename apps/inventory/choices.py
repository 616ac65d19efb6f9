"""Status choices, each member with its label and UI colour."""

from django.db import models

from apps.coloured_choices import ColouredChoices


class Reachability(ColouredChoices):
    UNKNOWN = "unknown", "Unknown", "grey"
    REACHABLE = "reachable", "Reachable", "green"
    UNREACHABLE = "unreachable", "Unreachable", "red"
    AUTH_FAILED = "auth_failed", "Authentication failed", "red"
    HOST_KEY_MISMATCH = "host_key_mismatch", "Host key changed", "red"
    NO_HOST_KEY = "no_host_key", "No pinned host key", "amber"


class NpuHealth(ColouredChoices):
    OK = "OK", "OK", "green"
    WARNING = "Warning", "Warning", "amber"
    ALARM = "Alarm", "Alarm", "red"
    CRITICAL = "Critical", "Critical", "red"
    UNKNOWN = "Unknown", "Unknown", "grey"


class CredentialKind(models.TextChoices):
    PRIVATE_KEY = "private_key", "Private key"
    PASSWORD = "password", "Password"
