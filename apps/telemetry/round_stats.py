"""Counters of the scrape rounds for the control plane's own /metrics (rounds, their duration, targets read).

The telemetry workers count, the web process reads: the counters are integers in Django's cache (Redis INCR, so
two workers counting at once never lose a round), one set per deployment. Durations are kept in microseconds and
in histogram buckets (not cumulative; the reader sums them up).
"""

from __future__ import annotations

import bisect
import time

from django.core.cache import cache

DURATION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # the last bucket, index len(...), is +Inf
COUNTERS = ("rounds", "duration_us", "targets", "failed")


def stat_key(deployment_id: int, name: str) -> str:
    return f"selfmetrics:round:{deployment_id}:{name}"


def _incr(key: str, delta: int) -> None:
    cache.add(key, 0, timeout=None)
    cache.incr(key, delta)


def record_round_stats(*, deployment_id: int, duration_s: float, targets: int, failed: int) -> None:
    """Count one finished round (called by services.deployment_scrape)."""
    _incr(stat_key(deployment_id, "rounds"), 1)
    _incr(stat_key(deployment_id, "duration_us"), round(duration_s * 1e6))
    _incr(stat_key(deployment_id, f"bucket{bisect.bisect_left(DURATION_BUCKETS_S, duration_s)}"), 1)
    if targets:
        _incr(stat_key(deployment_id, "targets"), targets)
    if failed:
        _incr(stat_key(deployment_id, "failed"), failed)
    cache.set_many({stat_key(deployment_id, "last_at"): time.time(), stat_key(deployment_id, "last_failed"): failed,
                    stat_key(deployment_id, "last_duration_s"): duration_s}, timeout=None)


def round_stats(deployment_ids) -> dict[int, dict]:
    """{deployment id: {rounds, duration_s, targets, failed, buckets (cumulative, +Inf last), last_at, last_failed,
    last_duration_s}} for the deployments that had at least one round; one cache read for all of them."""
    names = [*COUNTERS, *(f"bucket{i}" for i in range(len(DURATION_BUCKETS_S) + 1)),
             "last_at", "last_failed", "last_duration_s"]
    ids = list(deployment_ids)
    values = cache.get_many([stat_key(d, n) for d in ids for n in names])
    out = {}
    for d in ids:
        rounds = values.get(stat_key(d, "rounds"))
        if not rounds:
            continue
        per_bucket = [int(values.get(stat_key(d, f"bucket{i}"), 0)) for i in range(len(DURATION_BUCKETS_S) + 1)]
        cumulative = [sum(per_bucket[:i + 1]) for i in range(len(per_bucket))]
        out[d] = {"rounds": int(rounds), "duration_s": int(values.get(stat_key(d, "duration_us"), 0)) / 1e6,
                  "targets": int(values.get(stat_key(d, "targets"), 0)),
                  "failed": int(values.get(stat_key(d, "failed"), 0)), "buckets": cumulative,
                  "last_at": values.get(stat_key(d, "last_at")), "last_failed": values.get(stat_key(d, "last_failed")),
                  "last_duration_s": values.get(stat_key(d, "last_duration_s"))}
    return out
