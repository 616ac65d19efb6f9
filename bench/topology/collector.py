"""The collector's cost: apps.telemetry.services.deployment_scrape (fetch, parse, live_state, health, Redis write,
history, push) over a growing subset of the deployment's targets, CPU seconds of this process per round
(time.process_time: every thread, the fetch pool's too; the endpoints run in another process) and wall time."""

from __future__ import annotations

import cProfile
import json
import pickle
import pstats
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager


def one_round(deployment, procs: list) -> tuple[float, float, dict]:
    from apps.telemetry.services import deployment_scrape

    c0, w0 = time.process_time(), time.perf_counter()
    state = deployment_scrape(deployment, procs)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if state is None:
        raise SystemExit("a scrape round of the bench deployment was still locked")
    bad = [t for t in state["targets"] if t["status"] != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} of {len(state['targets'])} targets not read, e.g. {bad[0]}")
    return cpu, wall, state


def full_history(deployment_id: int) -> None:
    """The Redis history as it is after 5 minutes of rounds (HISTORY_LEN points), so every round reads and writes
    the list it will in steady state."""
    from django.core.cache import cache

    from apps.telemetry.selectors import HISTORY_LEN, history_key

    history = cache.get(history_key(deployment_id)) or []
    if history:
        last = history[-1]
        # Each point a copy of its own, as rounds make them: shared objects would pickle (and cost) once.
        points = [{**pickle.loads(pickle.dumps(last)), "at": last["at"] - 5 * (HISTORY_LEN - 1 - k)}
                  for k in range(HISTORY_LEN - 1)]
        cache.set(history_key(deployment_id), points + [last], timeout=120)


def measure(deployment, procs: list, rounds: int) -> dict:
    one_round(deployment, procs)  # rates need a previous round; connections are opened here
    full_history(deployment.pk)
    cpus, walls = [], []
    for _ in range(rounds):
        cpu, wall, state = one_round(deployment, procs)
        cpus.append(cpu)
        walls.append(wall)
    return {"targets": len(state["targets"]), "cpu_s": statistics.median(cpus), "wall_s": statistics.median(walls),
            "cpu_samples": cpus, "wall_samples": walls}


def payload_bytes(deployment_id: int) -> dict[str, int]:
    """The websocket message one round pushes (services.deployment_scrape's emit) as JSON: all, and its parts."""
    live = current_push(deployment_id)

    def size(x) -> int:
        return len(json.dumps(x, separators=(",", ":")))

    parts = {k: size(v) for k, v in live.items() if k != "history"}
    parts |= {f"history.{k}": size(v) for k, v in live.get("history", {}).items()}
    return {"all": size({"type": "live", "live": live}), **dict(sorted(parts.items(), key=lambda kv: -kv[1])[:4])}


def current_push(deployment_id: int) -> dict:
    """The live section services.deployment_scrape pushes for the last round stored in Redis."""
    from django.core.cache import cache

    from apps.telemetry.selectors import history_key, live_key, push_view

    history = cache.get(history_key(deployment_id)) or []
    return push_view(cache.get(live_key(deployment_id)), history[-1])


def redis_bytes(deployment_id: int) -> dict[str, int]:
    """What a round writes to Redis (services.deployment_scrape's set_many), as Django's cache pickles it."""
    from django.core.cache import cache

    from apps.telemetry.selectors import history_key, live_key

    return {name: len(pickle.dumps(cache.get(key), pickle.HIGHEST_PROTOCOL))
            for name, key in (("live state", live_key(deployment_id)), ("history", history_key(deployment_id)))}


def busy_edges_only(payload: dict) -> dict:
    """A live push without what the page does not draw: P->D edges with no traffic in the round (the page shows
    a missing edge as idle, as one with zero flow), the edges' history, and of each instance's history all but
    its sparkline's field (static/js/topology/sparklines.js SPARK_FIELD: prompt tok/s of a Prefill, generation of a Decode)."""
    live = payload.get("live")
    if not live or "history_point" in live:  # already what services.deployment_scrape pushes since issue 12
        return payload
    edges = {k: v for k, v in live["edges"].items()
             if not k.startswith("kv_transfer:") or v.get("req_s") or v.get("kv_bytes_s")}
    field = {"prefill": "prompt_tok_s", "decode": "gen_tok_s"}
    instances = {name: {field[v["role"]]: series[field[v["role"]]]}
                 for name, series in live["history"]["instances"].items()
                 if (v := live["instances"].get(name)) and v.get("role") in field}
    return {**payload, "live": {**live, "edges": edges,
                                "history": {**live["history"], "edges": {}, "instances": instances}}}


@contextmanager
def trimmed_pushes():
    """services.deployment_scrape's emit, with busy_edges_only applied (patched in this process only)."""
    from apps.telemetry import services

    real = services.emit
    services.emit = lambda group, payload, **kw: real(group, busy_edges_only(payload), **kw)
    try:
        yield
    finally:
        services.emit = real


@contextmanager
def variant(name: str):
    """The round as it is ("as is"), or changed in this process only: "keep-alive", a connection pool per target
    (urllib3's PoolManager keeps 10 by default, so beyond 10 targets every round connects anew); "whole pages",
    the parse as it was before apps/telemetry/scrape.py dropped the lines its readers never use (scrape.READS):
    every line through prometheus_client, the proxy's P×D edges too."""
    import urllib3

    from apps.telemetry import scrape

    saved = scrape._http, scrape.READS
    if name == "keep-alive":
        scrape._http = urllib3.PoolManager(num_pools=4096, retries=False, maxsize=4, timeout=urllib3.Timeout(
            connect=scrape.CONNECT_TIMEOUT_S, read=scrape.READ_TIMEOUT_S))
    if name == "whole pages":
        scrape.READS = {}
    try:
        yield
    finally:
        scrape._http, scrape.READS = saved


AREAS = (("prometheus_client", "parse (prometheus_client)"), ("telemetry/scrape.py", "extract (scrape.py)"),
         ("urllib3", "fetch (urllib3, http.client)"), ("http/client.py", "fetch (urllib3, http.client)"),
         ("socket", "fetch (urllib3, http.client)"), ("telemetry/live.py", "live_state (live.py)"),
         ("telemetry/selectors.py", "live_view (selectors.py)"), ("redis", "Redis (redis-py, pickle)"),
         ("pickle", "Redis (redis-py, pickle)"), ("django/core/cache", "Redis (redis-py, pickle)"),
         ("channels", "push (channels_redis, msgpack)"), ("msgpack", "push (channels_redis, msgpack)"),
         ("django/db", "database (ORM)"), ("psycopg", "database (ORM)"))


def profile(deployment, procs: list, top: int = 12) -> tuple[list[tuple[str, float]], list[str]]:
    """One round under cProfile: own time by area (which library a function lives in) and the top functions.
    The fetch pool's threads are profiled each on their own (read_target wrapped), then summed in."""
    prof, per_thread = cProfile.Profile(time.thread_time), []
    import apps.telemetry.services as services

    real_read_target = services.read_target

    def profiled_read_target(*args, **kwargs):
        p = cProfile.Profile(time.thread_time)  # CPU of this thread: waiting for the GIL or a socket is not counted
        per_thread.append(p)
        return p.runcall(real_read_target, *args, **kwargs)

    services.read_target = profiled_read_target
    try:
        prof.runcall(one_round, deployment, procs)
    finally:
        services.read_target = real_read_target
    stats = pstats.Stats(prof)
    for p in per_thread:
        stats.add(p)
    areas: dict[str, float] = defaultdict(float)
    rows = []
    for (file, line, func), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        area = next((name for needle, name in AREAS if needle in f"{file} {func}"), "other")
        areas[area] += tt
        rows.append((tt, f"{file.rsplit('/site-packages/', 1)[-1].rsplit('/work/main/', 1)[-1]}:{line} {func}"))
    rows.sort(reverse=True)
    total = sum(areas.values())
    return (sorted(areas.items(), key=lambda kv: -kv[1]),
            [f"{100 * tt / total:5.1f}%  {name}" for tt, name in rows[:top]])


def timed_rounds(deployment, procs: list, interval_s: float, stop, on_round) -> None:
    """Rounds every interval_s (as beat would start them) until stop is set; on_round(started, finished)."""
    from django.db import connection

    try:
        next_at = time.monotonic()
        while not stop.is_set():
            started = time.time()
            one_round(deployment, procs)
            on_round(started, time.time())
            next_at += interval_s
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        connection.close()
