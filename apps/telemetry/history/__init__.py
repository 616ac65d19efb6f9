"""History of the scrape rounds in the database, downsampled by tier (models.MetricPoint): each round writes raw
points (write.py), a periodic task rolls them up into 1-minute and 10-minute points and deletes what is older
than its tier keeps (rollup.py), and the charts read one subject's series over a window (selectors.py).
docs/telemetry-history.md."""

from __future__ import annotations

from .selectors import series, subjects
from .tiers import WINDOWS
from .write import record_round

__all__ = ["WINDOWS", "record_round", "series", "subjects"]
