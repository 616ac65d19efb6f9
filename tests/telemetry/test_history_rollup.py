"""Rollup of raw points into 1-minute and 10-minute points (means, max for p99, None ignored; only closed
buckets; idempotent) and the retention cleanup of every tier."""

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.telemetry.history import series
from apps.telemetry.history.rollup import LOCK_KEY, clean, combine, rollup_and_clean
from apps.telemetry.models import HistoryTier, MetricPoint
from apps.telemetry.tasks import history_rollup_task

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def raw(deployment, subject, at, **values):
    return MetricPoint(deployment=deployment, tier=HistoryTier.RAW, subject=subject, at=at, values=values)


def points(tier):
    return {(p.subject, p.at): p.values for p in MetricPoint.objects.filter(tier=tier)}


def test_combine_means_numbers_ignores_none_and_takes_the_worst_p99():
    rows = [{"kv_usage": 0.2, "ttft_p99_s": 0.5, "ttft_p50_s": 0.1, "waiting": None},
            {"kv_usage": 0.4, "ttft_p99_s": 2.0, "ttft_p50_s": None, "waiting": None},
            {"kv_usage": None, "ttft_p99_s": None, "ttft_p50_s": 0.3}]
    assert combine(rows) == {"kv_usage": pytest.approx(0.3), "ttft_p99_s": 2.0, "ttft_p50_s": pytest.approx(0.2),
                             "waiting": None}


def test_closed_minutes_roll_up_once(deployment):
    MetricPoint.objects.bulk_create(
        [raw(deployment, "inst:p0", T0 + timedelta(seconds=s), running=s, ttft_p99_s=s / 100) for s in range(0, 180, 5)]
        + [raw(deployment, "proxy", T0 + timedelta(seconds=62), req_s=4.0)])
    # at 12:03:20 the 12:02 minute ended 20 s ago: a round may still be storing its point, so it is not closed
    out = rollup_and_clean(T0 + timedelta(minutes=3, seconds=20))
    assert out["made"] == {"1m": 3, "10m": 0}
    minute = points(HistoryTier.MINUTE)
    assert set(minute) == {("inst:p0", T0), ("inst:p0", T0 + timedelta(minutes=1)), ("proxy", T0 + timedelta(minutes=1))}
    assert minute[("inst:p0", T0)] == {"running": pytest.approx(27.5), "ttft_p99_s": pytest.approx(0.55)}
    assert minute[("inst:p0", T0 + timedelta(minutes=1))]["running"] == pytest.approx(87.5)
    assert minute[("proxy", T0 + timedelta(minutes=1))] == {"req_s": 4.0}

    assert rollup_and_clean(T0 + timedelta(minutes=3, seconds=25))["made"] == {"1m": 0, "10m": 0}
    assert MetricPoint.objects.filter(tier=HistoryTier.MINUTE).count() == 3
    assert rollup_and_clean(T0 + timedelta(minutes=3, seconds=31))["made"] == {"1m": 1, "10m": 0}
    assert points(HistoryTier.MINUTE)[("inst:p0", T0 + timedelta(minutes=2))]["running"] == pytest.approx(147.5)


def test_ten_minutes_roll_up_from_the_minutes_and_are_what_a_week_draws(deployment):
    MetricPoint.objects.bulk_create([raw(deployment, "inst:p0", T0 + timedelta(seconds=s), kv_usage=(s // 60) / 10,
                                         itl_p99_s=1.0 if s == 125 else 0.1) for s in range(0, 660, 5)])
    now = T0 + timedelta(minutes=10, seconds=45)
    assert rollup_and_clean(now)["made"] == {"1m": 10, "10m": 1}
    ten = points(HistoryTier.TEN_MINUTES)
    assert ten == {("inst:p0", T0): {"kv_usage": pytest.approx(0.45), "itl_p99_s": 1.0}}  # minutes 0..9 / 10
    week = series(deployment, "inst:p0", window_s=604800, now=now)
    assert week["tier"] == "10m" and week["at"] == ["2026-12-02T12:00:00Z"] and week["series"]["itl_p99_s"] == [1.0]
    day = series(deployment, "inst:p0", window_s=86400, now=now)
    assert day["tier"] == "1m" and len(day["at"]) == 10 and day["series"]["kv_usage"][3] == pytest.approx(0.3)
    assert rollup_and_clean(now + timedelta(seconds=10))["made"] == {"1m": 0, "10m": 0}


def test_queries_do_not_grow_with_subjects_or_deployments(deployment):
    def queries(n):
        MetricPoint.objects.all().delete()
        MetricPoint.objects.bulk_create([raw(deployment, f"inst:p{i}", T0 + timedelta(seconds=s), running=1)
                                         for i in range(n) for s in range(0, 120, 5)])
        with CaptureQueriesContext(connection) as ctx:
            rollup_and_clean(T0 + timedelta(minutes=2, seconds=40))
        return len(ctx.captured_queries)

    assert queries(2) == queries(40)


def test_a_pause_without_rounds_is_skipped_not_walked(deployment):
    MetricPoint.objects.bulk_create([raw(deployment, "inst:p0", T0, running=1)])
    rollup_and_clean(T0 + timedelta(minutes=2))
    MetricPoint.objects.bulk_create([raw(deployment, "inst:p0", T0 + timedelta(days=3), running=2)])
    with CaptureQueriesContext(connection) as ctx:
        out = rollup_and_clean(T0 + timedelta(days=3, minutes=2))
    assert out["made"] == {"1m": 1, "10m": 1} and len(ctx.captured_queries) < 20
    assert points(HistoryTier.MINUTE)[("inst:p0", T0 + timedelta(days=3))] == {"running": 2.0}


def test_a_run_while_another_holds_the_lock_does_nothing(deployment):
    MetricPoint.objects.bulk_create([raw(deployment, "inst:p0", T0, running=1)])
    cache.add(LOCK_KEY, "other", timeout=60)
    assert rollup_and_clean(T0 + timedelta(minutes=5)) == {"skipped": True}
    assert not MetricPoint.objects.filter(tier=HistoryTier.MINUTE).exists()
    cache.delete(LOCK_KEY)
    assert rollup_and_clean(T0 + timedelta(minutes=5))["made"]["1m"] == 1


def test_cleanup_deletes_what_each_tier_no_longer_keeps(deployment, settings):
    now = datetime.now(UTC)
    ages = {HistoryTier.RAW: (timedelta(minutes=59), timedelta(minutes=61)),
            HistoryTier.MINUTE: (timedelta(hours=23), timedelta(hours=25)),
            HistoryTier.TEN_MINUTES: (timedelta(days=29), timedelta(days=31))}
    MetricPoint.objects.bulk_create([MetricPoint(deployment=deployment, tier=tier, subject="kept" if i == 0 else "gone",
                                                 at=now - age, values={})
                                     for tier, both in ages.items() for i, age in enumerate(both)])
    assert clean(now) == {"raw": 1, "1m": 1, "10m": 1}
    assert set(MetricPoint.objects.values_list("tier", "subject")) == {("raw", "kept"), ("1m", "kept"),
                                                                       ("10m", "kept")}
    settings.PDCP_HISTORY_TEN_MINUTE_DAYS = 7
    settings.PDCP_HISTORY_RAW_HOURS = 2
    MetricPoint.objects.create(deployment=deployment, tier=HistoryTier.RAW, subject="gone", at=now - timedelta(
        minutes=119), values={})
    assert clean(now) == {"raw": 0, "1m": 0, "10m": 1}


def test_the_beat_task_rolls_up_then_cleans(deployment):
    now = datetime.now(UTC)
    MetricPoint.objects.bulk_create([raw(deployment, "inst:p0", now - timedelta(minutes=70), running=2),
                                     raw(deployment, "inst:p0", now - timedelta(minutes=5), running=1)])
    out = history_rollup_task()
    assert out["made"]["1m"] == 2 and out["deleted"]["raw"] == 1  # rolled up before it went
    assert MetricPoint.objects.filter(tier=HistoryTier.MINUTE).count() == 2


@pytest.mark.procs
def test_history_settings_refuse_bad_values_naming_them():
    root = Path(__file__).resolve().parents[2]
    for name, value in (("PDCP_HISTORY_RAW_HOURS", "0"), ("PDCP_HISTORY_MINUTE_DAYS", "a day"),
                        ("PDCP_HISTORY_TEN_MINUTE_DAYS", "-3")):
        proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=root, env={**os.environ, name: value},
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and f"{name} must be" in proc.stderr, proc.stderr[-500:]
