"""The history tiers: how far back each one is kept (settings PDCP_HISTORY_*), its step, and which tier draws a
window (the finest one kept that long)."""

from __future__ import annotations

from django.conf import settings

from ..models import HistoryTier

WINDOWS = {"15m": 900, "1h": 3600, "6h": 21600, "1d": 86400, "7d": 604800, "30d": 2592000}

RAW_STEP_S = 5  # the scrape period (CELERY_BEAT_SCHEDULE "scrape-live-state")
STEP_S = {HistoryTier.RAW: RAW_STEP_S, HistoryTier.MINUTE: 60, HistoryTier.TEN_MINUTES: 600}
FINEST_FIRST = (HistoryTier.RAW, HistoryTier.MINUTE, HistoryTier.TEN_MINUTES)


def retention_s() -> dict[str, int]:
    """How long each tier is kept, in seconds."""
    return {HistoryTier.RAW: settings.PDCP_HISTORY_RAW_HOURS * 3600,
            HistoryTier.MINUTE: settings.PDCP_HISTORY_MINUTE_DAYS * 86400,
            HistoryTier.TEN_MINUTES: settings.PDCP_HISTORY_TEN_MINUTE_DAYS * 86400}


def tier_for(window_s: int) -> str:
    """The finest tier whose retention covers the window; the coarsest when none does."""
    kept = retention_s()
    return next((t for t in FINEST_FIRST if window_s <= kept[t]), HistoryTier.TEN_MINUTES)
