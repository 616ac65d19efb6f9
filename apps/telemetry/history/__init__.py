"""History of the scrape rounds in the database, downsampled by tier (models.MetricPoint)."""

from __future__ import annotations


def record_round(deployment, state: dict) -> None:
    """Keep one round's numbers (called by services.deployment_scrape after the live state is stored)."""
    # INTERFACE: filled by the history work (issue 12 item 1)
