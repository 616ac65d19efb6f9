"""Live state of one deployment from one round of target readings and the previous round: gauges as read,
counters turned into rates over the time between the two rounds, and the KV flow of every P→D edge.

Pure functions on plain data, so the arithmetic is tested without a network, a database or Redis.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from .edge_ids import edge_id, instance_end, is_kv_edge, kv_edge_id, process_end
from .scrape import OK, TargetReading

MAX_RATE_WINDOW_S = 120.0  # older than this, the previous round says nothing about "now"
KV_SOURCE_PROXY = "proxy"    # proxy per-edge prompt tokens × the model profile's KV bytes per token
KV_SOURCE_ENGINE = "engine"  # engines' own KV transfer counters (simcluster only; vllm-ascend exports none)
ENGINE_KV_METRIC = "simcluster:kv_transfer_model_bytes_total"


@dataclass(frozen=True)
class TargetInfo:
    """What a scrape needs to know of one running Process row."""

    key: str
    role: str
    instance: str
    address: str
    port: int | None      # the API port of an engine or the proxy: how the proxy and peers name it
    metrics_url: str


def host_port(address: str, port: int | None) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def counter_delta(cur: float | None, prev: float | None) -> float | None:
    """Increase of a counter; a counter that went down was restarted, so all of its value is new."""
    if cur is None or prev is None:
        return None
    return cur - prev if cur >= prev else cur


def rate(cur: float | None, prev: float | None, dt: float | None) -> float | None:
    d = counter_delta(cur, prev)
    return None if d is None or not dt else d / dt


def window_mean(sum_now, sum_prev, count_now, count_prev) -> float | None:
    """Mean of a histogram over the window: Δsum / Δcount (None when nothing was observed in it)."""
    dc, ds = counter_delta(count_now, count_prev), counter_delta(sum_now, sum_prev)
    if dc is None or ds is None or dc <= 0:
        return None
    return ds / dc


def histogram_quantile(q: float, buckets: dict[str, float]) -> float | None:
    """Prometheus' histogram_quantile on cumulative buckets {le: count}: the bucket holding rank q·total, with
    linear interpolation inside it (the first bucket starts at 0). Rank in +Inf: the highest finite bound.
    None without observations or without a +Inf bucket (Prometheus: NaN)."""
    rows = sorted((float(le), count) for le, count in buckets.items())
    if len(rows) < 2 or rows[-1][0] != math.inf:
        return None
    bounds, counts = [b for b, _ in rows], []
    for _, count in rows:
        counts.append(max(count, counts[-1]) if counts else count)  # a non-monotonic read, as Prometheus fixes it
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(rows) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, below = (0.0, 0.0) if b == 0 else (bounds[b - 1], counts[b - 1])
    inside = counts[b] - below
    return start if inside <= 0 else start + (bounds[b] - start) * (rank - below) / inside


def bucket_delta(cur: dict[str, float] | None, prev: dict[str, float] | None) -> dict[str, float] | None:
    """Observations per bucket between two reads of one process's cumulative buckets; a bucket that went down
    means the process restarted, and then all of its buckets are new."""
    if cur is None or prev is None:
        return None
    if any(count < prev.get(le, 0.0) for le, count in cur.items()):
        return dict(cur)
    return {le: count - prev.get(le, 0.0) for le, count in cur.items()}


def kv_bytes_rate(prompt_tok_s: float | None, kv_bytes_per_token: int | None) -> float | None:
    if prompt_tok_s is None or not kv_bytes_per_token:
        return None
    return prompt_tok_s * kv_bytes_per_token


def ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _status(readings: list[TargetReading]) -> tuple[str, str]:
    bad = [r for r in readings if r.status != OK]
    if not bad:
        return OK, ""
    reason = "; ".join(f"{r.key}: {r.status} ({r.reason})" for r in bad)
    return ("partial" if len(bad) < len(readings) else bad[0].status), reason


def live_state(*, deployment_id: int, at: float, targets: list[TargetInfo], readings: list[TargetReading],
               kv_bytes_per_token: int | None, previous: dict | None) -> dict:
    """The stored live state of a deployment after one round of readings (JSON-ready)."""
    dt = None
    prev_values: dict[str, dict] = {}
    if previous and 0 < at - previous.get("at", 0) <= MAX_RATE_WINDOW_S:
        dt = at - previous["at"]
        prev_values = {t["key"]: t["values"] for t in previous.get("targets", ()) if t["status"] == OK}
    info = {t.key: t for t in targets}
    instance_of = {host_port(t.address, t.port): t.instance for t in targets if t.role in ("prefill", "decode")}

    engines: dict[str, list[tuple[TargetReading, dict]]] = defaultdict(list)
    for r in readings:
        if r.role in ("prefill", "decode"):
            engines[info[r.key].instance].append((r, prev_values.get(r.key, {})))

    instances = {name: _instance(rows, dt) for name, rows in engines.items()}
    proxy = next((r for r in readings if r.role == "proxy"), None)
    proxy_key = proxy.key if proxy else None
    edges = _edges(proxy, prev_values.get(proxy_key, {}) if proxy else {}, engines, info, instance_of, dt,
                   kv_bytes_per_token)
    services = {}
    for r in readings:
        if r.role == "proxy":
            services[r.key] = _proxy_service(r, prev_values.get(r.key, {}), dt)
        elif r.role == "kv_pool":
            services[r.key] = _pool_service(r, prev_values.get(r.key, {}), dt)
    return {
        "deployment": deployment_id, "at": at, "interval_s": dt, "kv_bytes_per_token": kv_bytes_per_token,
        "targets": [r.as_dict() for r in readings], "instances": instances, "edges": edges, "services": services,
        "pool": _pool_summary(instances, next((r.key for r in readings if r.role == "kv_pool"), None)),
    }


def _instance(rows: list[tuple[TargetReading, dict]], dt: float | None) -> dict:
    status, reason = _status([r for r, _ in rows])
    ok = [(r.values, p) for r, p in rows if r.status == OK]

    def total(field):
        vals = [v[field] for v, _ in ok if v.get(field) is not None]
        return sum(vals) if vals else None

    def was(p: dict, field: str) -> float | None:
        # A counter the previous (good) reading did not show had not been observed yet: it counts from 0. A field
        # the previous round's values lack altogether was stored before this code read it: no rate this once.
        if field not in p:
            return None
        return p[field] if p[field] is not None else 0.0

    def rate_sum(field):
        vals = [rate(v.get(field), was(p, field), dt) for v, p in ok]
        vals = [x for x in vals if x is not None]
        return sum(vals) if vals else None

    def mean(prefix):
        pairs = [(counter_delta(v.get(f"{prefix}_sum"), was(p, f"{prefix}_sum")),
                  counter_delta(v.get(f"{prefix}_count"), was(p, f"{prefix}_count"))) for v, p in ok]
        pairs = [(s, c) for s, c in pairs if s is not None and c]
        return sum(s for s, _ in pairs) / sum(c for _, c in pairs) if pairs else None

    def quantiles(prefix: str) -> dict[str, float | None]:
        """p50 and p99 over the window from the processes' bucket deltas, summed on the bounds they share."""
        deltas = [bucket_delta(v.get(f"{prefix}_buckets"), was_buckets(p, f"{prefix}_buckets")) for v, p in ok]
        deltas = [d for d in deltas if d] if dt else []  # a rank with no observed label set yet shows no buckets
        shared = set.intersection(*(set(d) for d in deltas)) if deltas else set()
        window = {le: sum(d[le] for d in deltas) for le in shared}
        return {f"{prefix}_p50_s": histogram_quantile(0.5, window), f"{prefix}_p99_s": histogram_quantile(0.99, window)}

    def was_buckets(p: dict, field: str) -> dict | None:
        return None if field not in p else (p[field] or {})

    def delta_sum(field):
        vals = [counter_delta(v.get(field), was(p, field)) for v, p in ok]
        vals = [x for x in vals if x is not None]
        return sum(vals) if vals else None

    def hit_rates(hits: str, queries: str) -> tuple[float | None, float | None]:
        """Share of looked-up tokens found: over the window (None when nothing was looked up in it), since start."""
        return (ratio(delta_sum(hits), delta_sum(queries)) if dt else None), ratio(total(hits), total(queries))

    usages = [v["kv_usage"] for v, _ in ok if v.get("kv_usage") is not None]
    prefix_window, prefix_total = hit_rates("prefix_hits", "prefix_queries")
    # vLLM's external_prefix_cache_*: tokens the KV connectors were asked for / supplied. On a Prefill that is the
    # pool (its P2P connector supplies nothing); on a Decode mostly the KV pulled from Prefill, plus the pool's
    # loads when kv_pool.consumer_is_to_load.
    connector_window, connector_total = hit_rates("external_hits", "external_queries")
    return {
        "status": status, "reason": reason, "role": rows[0][0].role, "processes": len(rows), "reachable": len(ok),
        "running": total("running"), "waiting": total("waiting"),
        "kv_usage": max(usages) if usages else None,  # the fullest rank: that is the one that will stall
        "prompt_tok_s": rate_sum("prompt_tokens"), "gen_tok_s": rate_sum("generation_tokens"),
        "ttft_s": mean("ttft") if dt else None, "itl_s": mean("itl") if dt else None,
        **quantiles("ttft"), **quantiles("itl"),
        "prefix_hit_rate": prefix_window, "prefix_hit_rate_total": prefix_total,
        "connector_hit_rate": connector_window, "connector_hit_rate_total": connector_total,
        "connector_hit_tok_s": rate_sum("external_hits"),
        "connector_hits": total("external_hits"), "connector_queries": total("external_queries"),
        "connector_hits_d": delta_sum("external_hits") if dt else None,
        "connector_queries_d": delta_sum("external_queries") if dt else None,
        "preemptions": total("preemptions"), "preempt_s": rate_sum("preemptions"),
        **_labelled_counters(ok, dt),
    }


def _labelled_counters(ok: list[tuple[dict, dict]], dt: float | None) -> dict:
    """Requests finished per reason and KV blocks per store tier: totals and rates, summed over the processes."""
    success: dict[str, float] = defaultdict(float)
    success_s: dict[str, float] = {}
    blocks: dict[str, dict[str, float | None]] = {}
    for v, p in ok:
        prev_success = p.get("success")
        for reason, count in (v.get("success") or {}).items():
            success[reason] += count
            r = rate(count, None if prev_success is None else prev_success.get(reason, 0.0), dt)
            if r is not None:
                success_s[reason] = success_s.get(reason, 0.0) + r
        prev_blocks = None if "store_blocks" not in p else {(b["tier"], b["op"]): b["blocks"]
                                                              for b in p["store_blocks"]}
        for b in v.get("store_blocks") or ():
            tier = blocks.setdefault(b["tier"], {"load": 0.0, "backup": 0.0, "load_s": None, "backup_s": None})
            if b["op"] not in ("load", "backup"):
                continue
            tier[b["op"]] += b["blocks"]
            r = rate(b["blocks"], None if prev_blocks is None else prev_blocks.get((b["tier"], b["op"]), 0.0), dt)
            if r is not None:
                tier[f"{b['op']}_s"] = (tier[f"{b['op']}_s"] or 0.0) + r
    return {"success": dict(success), "success_s": success_s, "store_blocks": blocks}


def _pool_service(r: TargetReading, prev: dict, dt: float | None) -> dict:
    """mooncake_master: keys and capacity as read, lookups/loads/puts per second. A page without master_* series is
    an idle master, said so in `note`."""
    if r.status != OK:
        return {"status": r.status, "reason": r.reason}
    v = r.values
    was = {k: (prev[k] or 0.0) if k in prev else None for k in ("lookups", "loads", "puts")}
    return {
        "status": OK, "reason": "", **v,
        "used": ratio(v.get("allocated_bytes"), v.get("total_bytes")),
        **{f"{k[:-1]}_s": rate(v.get(k), was[k], dt) for k in ("lookups", "loads", "puts")},
        "note": "" if v.get("master_series") else "idle: no master_* series (older masters omit zero values)",
    }


def _pool_summary(instances: dict[str, dict], master_key: str | None) -> dict:
    """The pool as the engines see it: the Prefills' KV-connector lookups (a Decode's also count the KV pulled
    from Prefill, so they are left out) as a hit rate over the window and since start and as tokens/s found;
    simcluster's blocks per tier (the pool's backend); `master`: the key of the master's entry in services."""
    def add(values):
        values = [x for x in values if x is not None]
        return sum(values) if values else None

    prefills = [i for i in instances.values() if i.get("role") == "prefill"]
    tiers: dict[str, dict] = {}
    for inst in instances.values():
        for tier, b in (inst.get("store_blocks") or {}).items():
            t = tiers.setdefault(tier, {"load": 0.0, "backup": 0.0, "load_s": None, "backup_s": None})
            t["load"] += b["load"]
            t["backup"] += b["backup"]
            for k in ("load_s", "backup_s"):
                t[k] = add([t[k], b[k]])
    return {
        "hit_rate": ratio(add(i.get("connector_hits_d") for i in prefills),
                          add(i.get("connector_queries_d") for i in prefills)),
        "hit_rate_total": ratio(add(i.get("connector_hits") for i in prefills),
                                add(i.get("connector_queries") for i in prefills)),
        "hit_tok_s": add(i.get("connector_hit_tok_s") for i in prefills),
        "tiers": tiers, "master": master_key,
    }


def _new_kv_edge() -> dict:
    return {"requests": 0.0, "prompt_tokens": 0.0, "req_s": None, "prompt_tok_s": None, "kv_bytes_s": None,
            "source": None, "source_label": "", "engine_kv_bytes_s": None}


def _edges(proxy: TargetReading | None, proxy_prev: dict, engines, info, instance_of, dt, kv_bytes_per_token):
    out: dict[str, dict] = {}

    def edge(p_inst: str, d_inst: str) -> dict:
        key = kv_edge_id(p_inst, d_inst)
        d = out.get(key)
        if d is None:
            d = out[key] = _new_kv_edge()
        return d

    def add(d: dict, field: str, value: float | None):
        if value is not None:
            d[field] = (d[field] or 0.0) + value

    if proxy is not None and proxy.status == OK:
        _proxy_edges(out, proxy.values["edges"], proxy_prev, instance_of, dt)
        if kv_bytes_per_token:
            label = f"proxy prompt tokens × {kv_bytes_per_token:,} B/token (model profile)"
            for d in out.values():
                if d["prompt_tok_s"] is not None:
                    d["kv_bytes_s"] = d["prompt_tok_s"] * kv_bytes_per_token
                    d["source"], d["source_label"] = KV_SOURCE_PROXY, label
        # Request legs proxy -> Prefill, per instance.
        legs_prev = {(b["role"], b["backend"]): b["requests"] for b in proxy_prev.get("backends", ())}
        for b in proxy.values["backends"]:
            inst = instance_of.get(b["backend"])
            if b["role"] != "prefill" or inst is None:
                continue
            d = out.setdefault(edge_id("request", process_end(proxy.key), instance_end(inst)),
                              {"requests": 0.0, "req_s": None})
            d["requests"] += b["requests"]
            add(d, "req_s", rate(b["requests"], legs_prev.get((b["role"], b["backend"]), 0.0 if proxy_prev else None), dt))

    # Cross-check from the engines' own counters: what each Decode received (else what each Prefill sent).
    measured: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for inst, rows in engines.items():
        for r, prev in rows:
            if r.status != OK:
                continue
            was = {(x["peer"], x["direction"]): x["bytes"] for x in prev.get("kv_transfer_model_bytes", ())}
            for x in r.values.get("kv_transfer_model_bytes", ()):
                peer = instance_of.get(x["peer"])
                if peer is None:
                    continue
                pair = (peer, inst) if x["direction"] == "recv" else (inst, peer)
                r_ = rate(x["bytes"], was.get((x["peer"], x["direction"]), 0.0 if prev else None), dt)
                if r_ is not None:
                    measured[pair][x["direction"]] += r_
    for (p_inst, d_inst), by_dir in measured.items():
        d = edge(p_inst, d_inst)
        d["engine_kv_bytes_s"] = by_dir.get("recv", by_dir.get("send"))
        if d["source"] is None:
            d["kv_bytes_s"], d["source"] = d["engine_kv_bytes_s"], KV_SOURCE_ENGINE
            d["source_label"] = f"engines' {ENGINE_KV_METRIC}"
    return out


def _proxy_edges(out: dict[str, dict], edges: list[dict], proxy_prev: dict, instance_of: dict, dt) -> None:
    """The proxy's per-pair counters summed into instance P->D edges, with their rates: one pass, one dict lookup
    per pair for the previous round's counters and one for the edge."""
    prev = {(e["prefill"], e["decode"]): e for e in proxy_prev.get("edges", ())} if dt else {}
    # An edge the previous round did not list had carried nothing yet: it counts from 0.
    unseen = {"requests": 0.0, "prompt_tokens": 0.0} if proxy_prev else {}
    for e in edges:
        p_addr, d_addr = e["prefill"], e["decode"]
        p_inst, d_inst = instance_of.get(p_addr), instance_of.get(d_addr)
        if p_inst is None or d_inst is None:
            continue  # an instance the proxy knows and this revision does not (added by hand)
        key = kv_edge_id(p_inst, d_inst)
        d = out.get(key)
        if d is None:
            d = out[key] = _new_kv_edge()
        requests, tokens = e["requests"], e["prompt_tokens"]
        d["requests"] += requests
        d["prompt_tokens"] += tokens
        if dt:
            was = prev.get((p_addr, d_addr), unseen)
            r = rate(requests, was.get("requests"), dt)
            if r is not None:
                d["req_s"] = (d["req_s"] or 0.0) + r
            r = rate(tokens, was.get("prompt_tokens"), dt)
            if r is not None:
                d["prompt_tok_s"] = (d["prompt_tok_s"] or 0.0) + r


def _proxy_service(r: TargetReading, prev: dict, dt: float | None) -> dict:
    if r.status != OK:
        return {"status": r.status, "reason": r.reason}
    v = r.values
    was = {k: prev.get(k) if prev.get(k) is not None else (0.0 if prev else None)
           for k in ("requests", "ttft_sum", "ttft_count")}
    return {"status": OK, "reason": "", "req_s": rate(v.get("requests"), was["requests"], dt),
            "ttft_s": window_mean(v.get("ttft_sum"), was["ttft_sum"], v.get("ttft_count"), was["ttft_count"]),
            "backends": [{k: b[k] for k in ("role", "backend", "inflight", "healthy", "state")} for b in v["backends"]]}


def history_point(state: dict) -> dict:
    """The few numbers a sparkline needs from one round."""
    return {"at": state["at"],
            "instances": {n: {k: i.get(k) for k in ("running", "waiting", "kv_usage", "prompt_tok_s", "gen_tok_s")}
                          for n, i in state["instances"].items()},
            "edges": {e: d.get("kv_bytes_s") for e, d in state["edges"].items() if is_kv_edge(e)}}
