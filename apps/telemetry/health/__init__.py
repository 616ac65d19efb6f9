"""Instance health: states derived from the health endpoint, the metrics and the process; transitions as events;
the auto-restart policy (models.InstanceHealth, HealthEvent, HealthPolicy; rules in docs/health-policy.md).

machine.py decides on plain data, probe.py asks the health URLs, record.py reads and writes the rows and starts the
restart jobs. evaluate_round never raises: a round's health trouble must not cost the round its metrics."""

from __future__ import annotations

import logging
import time

from .record import health_round

logger = logging.getLogger(__name__)


def evaluate_round(deployment, readings, *, now: float | None = None, prober=None) -> dict:
    """The health section of the live state after one round: {subject: {state, colour, reason, since, ...}}."""
    try:
        return health_round(deployment, readings, now=time.time() if now is None else now,
                            prober=prober)
    except Exception:
        logger.exception("health round of deployment %s failed", deployment.pk)
        return {}


__all__ = ["evaluate_round", "health_round"]
