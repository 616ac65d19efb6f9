"""Downsampling and retention, run every minute by tasks.history_rollup_task.

Each closed 1-minute bucket of raw points becomes one 1-minute point per subject, and each closed 10-minute
bucket of 1-minute points one 10-minute point. A point's field is the mean of the values below it that measured
something (None ignored; all None gives None), except the p99 latencies (*_p99_s), which take the max: a mean of
p99s would hide the worst minute, and the charts are read for the worst. A 10-minute mean is the mean of its
1-minute means (minutes weigh the same whatever number of rounds they had).

Idempotent: a tier's next bucket starts where its last point ends, a bucket is closed only CLOSE_GRACE_S after
it ends (a round stores its point after it finishes, up to the scrape lock's 15 s later), a bucket that already
has points is skipped, and one run at a time holds a lock. Then every tier loses what is older than it is kept.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.db.models import Max, Min
from django.utils import timezone

from ..models import HistoryTier, MetricPoint
from .tiers import STEP_S, retention_s

CLOSE_GRACE_S = 30
CHUNK_BUCKETS = 10  # a catch-up after a pause reads the tier below this many buckets at a time
LOCK_KEY, LOCK_TTL_S = "telemetry:history-rollup", 300
ROLLUPS = ((HistoryTier.RAW, HistoryTier.MINUTE), (HistoryTier.MINUTE, HistoryTier.TEN_MINUTES))


def rollup_and_clean(now: datetime | None = None) -> dict:
    """Roll every closed bucket up, then delete what each tier no longer keeps. Counts of points made and
    deleted per tier; {"skipped": True} when another run holds the lock."""
    now = now or timezone.now()
    token = uuid.uuid4().hex
    if not cache.add(LOCK_KEY, token, timeout=LOCK_TTL_S):
        return {"skipped": True}
    try:
        made = {}
        closed = _floor(now - timedelta(seconds=CLOSE_GRACE_S), STEP_S[HistoryTier.MINUTE])
        for below, tier in ROLLUPS:
            closed = _floor(closed, STEP_S[tier])  # a 10-minute bucket closes once its last minute is rolled up
            made[str(tier)] = rollup(below, tier, closed_before=closed)
        return {"made": made, "deleted": clean(now)}
    finally:
        if cache.get(LOCK_KEY) == token:  # a run that outlived its lock must not release the next run's
            cache.delete(LOCK_KEY)


def rollup(below: str, tier: str, *, closed_before: datetime) -> int:
    """Make the `tier` points of every bucket that ends by closed_before and has none yet; how many were made."""
    step = STEP_S[tier]
    last = MetricPoint.objects.filter(tier=tier).aggregate(at=Max("at"))["at"]
    after = last + timedelta(seconds=step) if last is not None else None
    made = 0
    while (start := _first_bucket(below, step, after, closed_before)) is not None:
        after = min(start + timedelta(seconds=step * CHUNK_BUCKETS), closed_before)
        made += _rollup_span(below, tier, start, after)
    return made


def _first_bucket(below: str, step: int, after: datetime | None, closed_before: datetime) -> datetime | None:
    """The start of the first closed bucket from `after` on with points of the tier below: a pause without
    rounds is skipped, not walked."""
    points = MetricPoint.objects.filter(tier=below, at__lt=closed_before)
    if after is not None:
        points = points.filter(at__gte=after)
    first = points.aggregate(at=Min("at"))["at"]
    return None if first is None else _floor(first, step)


def _rollup_span(below: str, tier: str, start: datetime, end: datetime) -> int:
    step = STEP_S[tier]
    buckets: dict[tuple[int, str, datetime], list[dict]] = defaultdict(list)
    for deployment_id, subject, at, values in MetricPoint.objects.filter(
            tier=below, at__gte=start, at__lt=end).values_list("deployment_id", "subject", "at", "values"):
        buckets[(deployment_id, subject, _floor(at, step))].append(values)
    done = set(MetricPoint.objects.filter(tier=tier, at__gte=start, at__lt=end)
               .values_list("deployment_id", "subject", "at"))
    points = [MetricPoint(deployment_id=d, tier=tier, subject=s, at=at, values=combine(rows))
              for (d, s, at), rows in buckets.items() if (d, s, at) not in done]
    MetricPoint.objects.bulk_create(points, batch_size=2000)
    return len(points)


def combine(rows: list[dict]) -> dict:
    """One point from the points of its bucket: per field the mean of the numbers (max for *_p99_s)."""
    numbers: dict[str, list[float]] = {}
    for values in rows:
        for field, value in values.items():
            column = numbers.setdefault(field, [])
            if isinstance(value, int | float) and not isinstance(value, bool):
                column.append(float(value))
    return {field: (None if not column else max(column) if field.endswith("_p99_s") else sum(column) / len(column))
            for field, column in numbers.items()}


def clean(now: datetime) -> dict[str, int]:
    """Delete every point older than its tier is kept; how many went, per tier."""
    deleted = {}
    for tier, kept_s in retention_s().items():
        count, _ = MetricPoint.objects.filter(tier=tier, at__lt=now - timedelta(seconds=kept_s)).delete()
        deleted[str(tier)] = count
    return deleted


def _floor(when: datetime, step_s: int) -> datetime:
    seconds = int(when.timestamp()) // step_s * step_s
    return datetime.fromtimestamp(seconds, UTC)
