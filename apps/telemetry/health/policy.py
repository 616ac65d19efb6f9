"""Reading and changing a deployment's health policy (models.HealthPolicy); the bounds every form and the API check."""

from __future__ import annotations

import re

from apps.deployments.models import Deployment

from ..models import HealthEvent, HealthPolicy, InstanceHealth

LIMITS = {"unhealthy_rounds": (1, 120), "backoff_s": (0, 86_400), "max_restarts": (0, 100)}
FIELDS = ("auto_restart", "unhealthy_rounds", "backoff_s", "max_restarts")
RECENT_EVENTS = 50


def health_policy_of(deployment: Deployment) -> HealthPolicy:
    """The stored policy, or the defaults (auto-restart off) unsaved."""
    return HealthPolicy.objects.filter(deployment=deployment).first() or HealthPolicy(deployment=deployment)


def health_policy_problems(values: dict) -> dict[str, str]:
    """field -> what is wrong, for values as typed (strings from a form, JSON from the API)."""
    problems = {}
    for name, (low, high) in LIMITS.items():
        if name not in values:
            continue
        number = _whole(values[name])
        if number is None:
            problems[name] = f"expected a whole number from {low} to {high}"
        elif not low <= number <= high:
            problems[name] = f"{number} is out of range: from {low} to {high}"
    if "auto_restart" in values and not isinstance(values["auto_restart"], bool):
        problems["auto_restart"] = "expected true or false"
    return problems


def _whole(raw) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"-?\d{1,9}", raw.strip()):
        return int(raw)
    return None


def health_policy_set(*, deployment: Deployment, values: dict) -> HealthPolicy:
    """Stores the given fields (checked by health_policy_problems first); the audit trail records the change."""
    policy = health_policy_of(deployment)
    for name in FIELDS:
        if name in values:
            setattr(policy, name, values[name] if name == "auto_restart" else _whole(values[name]))
    policy.save()
    return policy


def health_of(deployment: Deployment, *, subject: str | None = None, limit: int = RECENT_EVENTS) -> dict:
    """Every subject's kept state and the most recent events (of one subject when given), newest first."""
    states = InstanceHealth.objects.filter(deployment=deployment).order_by("subject")
    events = HealthEvent.objects.filter(deployment=deployment)
    if subject:
        states, events = states.filter(subject=subject), events.filter(subject=subject)
    return {"states": list(states), "events": list(events.order_by("-at", "-id")[:limit])}
