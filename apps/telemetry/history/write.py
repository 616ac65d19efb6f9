"""Writing one scrape round's numbers as raw history points: one per instance (`inst:<name>`), one per service
process (its key: proxy, kv-pool) and one for the pool as the engines see it (`pool`), in one insert."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db import transaction

from ..edge_ids import is_kv_edge, kv_edge_instances
from ..models import HistoryTier, MetricPoint

logger = logging.getLogger(__name__)

INSTANCE_FIELDS = ("kv_usage", "running", "waiting", "prompt_tok_s", "gen_tok_s", "ttft_s", "itl_s",
                   "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "prefix_hit_rate", "connector_hit_rate")
POOL_MASTER_FIELDS = ("key_count", "allocated_bytes", "total_bytes", "lookup_s", "load_s", "put_s")
POOL_FIELDS = ("hit_rate", "hit_tok_s")


def record_round(deployment, state: dict) -> None:
    """Keep one round's numbers (called by services.deployment_scrape after the live state is stored). Never
    raises: history is worth less than the round that goes on to the page."""
    try:
        points = round_points(deployment.pk, state)
        with transaction.atomic():  # a failed insert must not spoil a transaction the caller may be in
            MetricPoint.objects.bulk_create(points)
    except Exception:  # noqa: BLE001 - a database hiccup or an odd state costs this round's history, nothing else
        logger.exception("history of deployment %s: the round at %s was not kept", deployment.pk, state.get("at"))


def round_points(deployment_id: int, state: dict) -> list[MetricPoint]:
    at = datetime.fromtimestamp(state["at"], UTC)
    kv_in, kv_out = kv_flow(state.get("edges", {}))
    rows = {f"inst:{name}": instance_values(inst, kv_in.get(name), kv_out.get(name))
            for name, inst in state.get("instances", {}).items()}
    role = {t["key"]: t["role"] for t in state.get("targets", ())}
    for key, service in state.get("services", {}).items():
        if role.get(key) == "proxy":
            rows[key] = proxy_values(service)
        elif role.get(key) == "kv_pool":
            rows[key] = {f: _number(service.get(f)) for f in POOL_MASTER_FIELDS}
    pool = state.get("pool") or {}
    pool_values = {f: _number(pool.get(f)) for f in POOL_FIELDS}
    if pool.get("master") or any(v is not None for v in pool_values.values()):  # else the deployment has no pool
        rows["pool"] = pool_values
    return [MetricPoint(deployment_id=deployment_id, tier=HistoryTier.RAW, at=at, subject=subject, values=values)
            for subject, values in rows.items()]


def instance_values(inst: dict, kv_in: float | None, kv_out: float | None) -> dict:
    return {**{f: _number(inst.get(f)) for f in INSTANCE_FIELDS}, "kv_in_bytes_s": kv_in, "kv_out_bytes_s": kv_out}


def proxy_values(service: dict) -> dict:
    inflight = [b["inflight"] for b in service.get("backends") or () if _number(b.get("inflight")) is not None]
    return {"req_s": _number(service.get("req_s")), "ttft_s": _number(service.get("ttft_s")),
            "inflight": float(sum(inflight)) if inflight else None}


def kv_flow(edges: dict) -> tuple[dict[str, float], dict[str, float]]:
    """KV bytes/s into and out of each instance: the sum of its P→D edges' kv_bytes_s; an instance no measured
    edge touches is absent (None: not measured)."""
    into: dict[str, float] = {}
    out: dict[str, float] = {}
    for key, edge in edges.items():
        value = _number(edge.get("kv_bytes_s"))
        if not is_kv_edge(key) or value is None:
            continue
        source, target = kv_edge_instances(key)
        into[target] = into.get(target, 0.0) + value
        out[source] = out.get(source, 0.0) + value
    return into, out


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
