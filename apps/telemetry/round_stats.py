"""Counters of the scrape rounds for the control plane's own /metrics (rounds, their duration, targets read)."""

from __future__ import annotations


def record_round_stats(*, deployment_id: int, duration_s: float, targets: int, failed: int) -> None:
    """Count one finished round (called by services.deployment_scrape)."""
    # INTERFACE: filled by the ecosystem work (issue 12 item 4)
