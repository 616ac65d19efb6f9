"""Instance health: states derived from the health endpoint, the metrics and the process; transitions as events;
the auto-restart policy (models.InstanceHealth, HealthEvent, HealthPolicy)."""

from __future__ import annotations


def evaluate_round(deployment, processes, targets, readings, state: dict) -> dict:
    """The health section of the live state after one round: {subject: {state, since, reason, ...}}."""
    # INTERFACE: filled by the health work (issue 12 item 2)
    return {}
