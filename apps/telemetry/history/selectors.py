"""Reading the history: one subject's series over a window, and which subjects have any. One query each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from apps.deployments.models import Process

from ..models import MetricPoint
from .tiers import FINEST_FIRST, STEP_S, tier_for


def _deployment_id(deployment) -> int:
    return getattr(deployment, "pk", deployment)


def subjects(deployment) -> list[str]:
    """Every subject (inst:<name>, proxy, kv-pool, pool) with at least one point in any tier, sorted. One query
    that hops from subject to subject along the series index (a DISTINCT would read every point)."""
    table = MetricPoint._meta.db_table
    deployment_id = _deployment_id(deployment)
    sql = f"""
        WITH RECURSIVE tiers(tier) AS (VALUES {", ".join(["(%s)"] * len(FINEST_FIRST))}),
        hops(tier, subject) AS (
            SELECT tier, (SELECT MIN(p.subject) FROM {table} p WHERE p.deployment_id = %s AND p.tier = tiers.tier)
            FROM tiers
            UNION ALL
            SELECT hops.tier, (SELECT MIN(p.subject) FROM {table} p WHERE p.deployment_id = %s
                               AND p.tier = hops.tier AND p.subject > hops.subject)
            FROM hops WHERE hops.subject IS NOT NULL)
        SELECT DISTINCT subject FROM hops WHERE subject IS NOT NULL"""
    with connection.cursor() as cursor:
        cursor.execute(sql, [*(str(t) for t in FINEST_FIRST), deployment_id, deployment_id])
        return sorted(row[0] for row in cursor.fetchall())


def has_subject(deployment, subject: str) -> bool:
    return MetricPoint.objects.filter(deployment_id=_deployment_id(deployment), subject=subject).exists()


def process_subjects(deployment, wanted: set[str] | None = None) -> set[str]:
    """Subjects the deployment's Process rows name (instances, service processes, the pool summary when a pool
    runs): they are real even before their first point, so their history is empty rather than unknown."""
    out: set[str] = set()
    for key, role, instance in Process.objects.filter(deployment_id=_deployment_id(deployment)).values_list(
            "key", "role", "instance"):
        out.add(f"inst:{instance}" if role in ("prefill", "decode") else key)
        if role == "kv_pool":
            out.add("pool")
    return out if wanted is None else out & wanted


def series(deployment, subject: str, *, window_s: int, now: datetime | None = None) -> dict:
    """The subject's points of the last window_s seconds from the finest tier kept that long, oldest first: `at`
    (ISO-8601 UTC) and per field a column of the same length (None where a point lacks the field or measured
    nothing). A gap of more than two steps gets one all-None row a step after its last point, so a chart
    breaks its line there instead of drawing across the outage."""
    now = now or timezone.now()
    tier = tier_for(window_s)
    step = STEP_S[tier]
    rows = list(MetricPoint.objects.filter(deployment_id=_deployment_id(deployment), tier=tier, subject=subject,
                                           at__gt=now - timedelta(seconds=window_s), at__lte=now)
                .order_by("at").values_list("at", "values"))
    fields = sorted({k for _, values in rows for k in values})
    at: list[str] = []
    columns: dict[str, list] = {f: [] for f in fields}
    previous = None
    for when, values in rows:
        if previous is not None and (when - previous).total_seconds() > 2 * step:
            at.append(_iso(previous + timedelta(seconds=step)))
            for f in fields:
                columns[f].append(None)
        at.append(_iso(when))
        for f in fields:
            columns[f].append(_number(values.get(f)))
        previous = when
    return {"subject": subject, "window_s": window_s, "tier": str(tier), "step_s": step, "at": at,
            "series": columns}


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
