"""Reading a deployment's live state back from Redis, in the shape the topology picture draws: `live_view` is the
snapshot's `live` section (served once, with the sparklines' history), `push_view` the websocket message of each
round (only what the page draws, the newest history point instead of the whole series)."""

from __future__ import annotations

import time

from django.core.cache import cache

from .edge_ids import is_kv_edge, kv_edge_instances

HISTORY_LEN = 60          # rounds kept for sparklines: 5 minutes at one round every 5 s
LIVE_TTL_S = 120          # no round for this long (beat stopped, processes stopped): the state disappears
STALE_AFTER_S = 15        # three missed rounds: shown, but marked stale
# More Prefill x Decode pairs than this: the picture draws the KV flow per instance into and out of a KV fabric, not
# per pair; per-pair detail is then the busy pairs only (in `edges`) and each instance's top peers (`kv_fabric`).
MESH_DETAIL_MAX_PAIRS = 512
TOP_PEERS = 5
SPARK_FIELDS = ("kv_usage", "running", "waiting", "prompt_tok_s", "gen_tok_s")
# What the page's live rows and hovers show of an instance (selectors drop the quantiles and raw connector counts).
PUSHED_INSTANCE_FIELDS = (
    "status", "reason", "processes", "reachable", "running", "waiting", "kv_usage", "prompt_tok_s", "gen_tok_s",
    "ttft_s", "itl_s", "prefix_hit_rate", "prefix_hit_rate_total", "connector_hit_rate", "connector_hit_rate_total",
    "connector_hit_tok_s", "preemptions", "preempt_s", "success", "success_s", "store_blocks")
PUSHED_EDGE_FIELDS = ("requests", "req_s", "prompt_tok_s", "kv_bytes_s", "engine_kv_bytes_s", "source_label")
SIGNIFICANT = 4  # the page shows at most 3-4 significant digits


def live_key(deployment_id: int) -> str:
    return f"telemetry:live:{deployment_id}"


def history_key(deployment_id: int) -> str:
    return f"telemetry:history:{deployment_id}"


def mesh_pairs(instances: dict) -> int:
    """Prefill x Decode pairs among the scraped instances (the picture's own count comes from the plan)."""
    roles = [i.get("role") for i in instances.values()]
    return roles.count("prefill") * roles.count("decode")


def aggregated(instances: dict) -> bool:
    return mesh_pairs(instances) > MESH_DETAIL_MAX_PAIRS


def busy(edge: dict) -> bool:
    return bool(edge.get("kv_bytes_s") or edge.get("req_s"))


def kv_fabric(edges: dict) -> dict:
    """Each instance's KV flow into or out of the fabric, summed over its pairs, with its busiest peers:
    {instance: {"out"|"in": {kv_bytes_s, req_s, pairs, peers: [[peer, kv_bytes_s, req_s], ...]}}}."""
    sides: dict[str, dict] = {}
    for edge_id, e in edges.items():
        if not is_kv_edge(edge_id) or not busy(e):
            continue
        p, d = kv_edge_instances(edge_id)
        for name, side, peer in ((p, "out", d), (d, "in", p)):
            s = sides.setdefault(name, {}).setdefault(side, {"kv_bytes_s": 0.0, "req_s": 0.0, "pairs": 0, "peers": []})
            s["kv_bytes_s"] += e.get("kv_bytes_s") or 0.0
            s["req_s"] += e.get("req_s") or 0.0
            s["pairs"] += 1
            s["peers"].append([peer, e.get("kv_bytes_s"), e.get("req_s")])
    for by_side in sides.values():
        for s in by_side.values():
            s["peers"] = sorted(s["peers"], key=lambda x: -(x[1] or 0.0))[:TOP_PEERS]
    return _rounded(sides)


COUNT_FIELDS = frozenset({"requests", "preemptions", "success", "running", "waiting", "load", "backup"})


def _rounded(value, *, count: bool = False):
    """Floats to SIGNIFICANT digits; counts (COUNT_FIELDS, shown whole) stay exact to the unit."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return value
        if count and abs(value) >= 10 ** SIGNIFICANT:
            return float(round(value))
        return float(f"{value:.{SIGNIFICANT}g}")
    if isinstance(value, dict):
        return {k: _rounded(v, count=count or k in COUNT_FIELDS) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v, count=count) for v in value]
    return value


def _head(state: dict, now: float | None) -> dict:
    now = time.time() if now is None else now
    age = max(0.0, now - state["at"])
    return {"at": state["at"], "age_s": round(age, 1), "stale": age > STALE_AFTER_S, "interval_s": state["interval_s"],
            "kv_bytes_per_token": state["kv_bytes_per_token"], "aggregated": aggregated(state["instances"])}


def live_view(state: dict, history: list[dict], *, now: float | None = None) -> dict:
    """The `live` section of the topology snapshot. A large mesh keeps only its busy pairs and no pair history."""
    big = aggregated(state["instances"])
    edges = {e: d for e, d in state["edges"].items() if not big or not is_kv_edge(e) or busy(d)}
    return {
        **_head(state, now),
        "instances": state["instances"], "edges": edges, "services": state["services"],
        "kv_fabric": kv_fabric(state["edges"]),
        "pool": state.get("pool"),  # rounds stored before the pool summary existed have none
        "health": state.get("health") or {},  # subject (instance name, service key) -> its health (health/)
        "targets": [{k: t[k] for k in ("key", "role", "url", "status", "reason", "scrape_ms")} for t in state["targets"]],
        "history": {
            "at": [h["at"] for h in history],
            "instances": {name: {field: [h["instances"].get(name, {}).get(field) for h in history]
                                 for field in SPARK_FIELDS}
                          for name in state["instances"]},
            "edges": {} if big else {e: [h["edges"].get(e) for h in history] for e in edges if is_kv_edge(e)},
        },
    }


def push_view(state: dict, point: dict, *, now: float | None = None) -> dict:
    """One round's websocket message: what drawLive draws, numbers rounded to what it shows. Busy P->D pairs only
    (a pair not sent is idle), none at all when the picture aggregates them (`kv_fabric` carries their totals and
    top peers); `history_point`: this round's sparkline values, for the page to append to the snapshot's series."""
    big = aggregated(state["instances"])
    edges = {} if big else {e: {k: d.get(k) for k in PUSHED_EDGE_FIELDS} for e, d in state["edges"].items()
                            if is_kv_edge(e) and busy(d)}
    return {
        **_head(state, now),
        "instances": _rounded({name: {k: i.get(k) for k in PUSHED_INSTANCE_FIELDS}
                               for name, i in state["instances"].items()}),
        "edges": _rounded(edges), "kv_fabric": kv_fabric(state["edges"]), "services": state["services"],
        "pool": state.get("pool"), "health": state.get("health") or {},
        "targets": [{k: t[k] for k in ("key", "status", "reason")} for t in state["targets"]],
        "history_point": {"at": point["at"], "instances": _rounded(point["instances"])},
    }


def history_entry(point: dict, instances: dict) -> dict:
    """The history point kept in Redis: a large mesh's P->D pairs have no history (nothing draws it)."""
    return {**point, "edges": {}} if aggregated(instances) else point


def deployment_live(deployment_id: int) -> dict | None:
    """The live section for a deployment, or None when nothing was scraped lately."""
    got = cache.get_many([live_key(deployment_id), history_key(deployment_id)])
    state = got.get(live_key(deployment_id))
    if state is None:
        return None
    return live_view(state, got.get(history_key(deployment_id)) or [])
