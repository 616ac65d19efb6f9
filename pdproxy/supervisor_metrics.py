"""What /metrics adds with `--workers N` (supervisor.py): the workers themselves, and the cache_aware figures of
every worker: picks summed; what the views hold, the largest worker's (every worker keeps the same view: the picks
are shared and each subscribes to the same KV cache events)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class WorkersCollector:
    def __init__(self, configured: int, alive: int, restarts: int, missing: int, answered: dict[int, float]):
        self.figures = (configured, alive, restarts, missing)
        self.answered = answered  # worker index -> client requests it answered (since it started)

    def collect(self):
        configured, alive, restarts, missing = self.figures
        workers = GaugeMetricFamily("pdproxy_workers", "Worker processes: configured, and serving now",
                                    labels=["state"])
        workers.add_metric(["configured"], configured)
        workers.add_metric(["serving"], alive)
        yield workers
        yield CounterMetricFamily("pdproxy_worker_restarts", "Workers started again after they exited",
                                  value=restarts)
        per_worker = CounterMetricFamily("pdproxy_worker_requests", "Client requests each worker answered since it "
                                         "started: how evenly the kernel spreads connections", labels=["worker"])
        for index, n in sorted(self.answered.items()):
            per_worker.add_metric([str(index)], n)
        yield per_worker
        yield GaugeMetricFamily("pdproxy_metrics_workers_missing", "Workers whose counts this scrape could not "
                                "read (their last counts are used)", value=missing)


class _MergedPolicy:
    def __init__(self):
        self.routed: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self.blocks: dict[str, int] = {}

    def held_chars(self) -> dict[str, int]:
        return self.held

    def kv_blocks(self) -> dict[str, int]:
        return self.blocks


def answered(snapshot: dict) -> float:
    return sum(row[1] for row in snapshot["counters"].get("pdproxy_requests", ()))


def merged_cache_aware(snapshots: list[dict]) -> dict:
    merged: dict[str, _MergedPolicy] = {}
    for snap in snapshots:
        for role, figures in snap.get("cache_aware", {}).items():
            policy = merged.setdefault(role, _MergedPolicy())
            for reason, n in figures["routed"].items():
                policy.routed[reason] = policy.routed.get(reason, 0) + n
            for addr, chars in figures["held"].items():
                policy.held[addr] = max(policy.held.get(addr, 0), chars)
            for addr, blocks in figures.get("kv_blocks", {}).items():
                policy.blocks[addr] = max(policy.blocks.get(addr, 0), blocks)
    return merged
