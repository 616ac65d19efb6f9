"""The control plane's own metrics, for /metrics (views.py): jobs by kind and status (the database), scrape rounds,
their duration and failed targets (round_stats.py), websocket clients per web process and SSH connections per
process (apps/realtime/process_gauges.py), live Celery workers per queue (apps/jobs/workers.py).

Every web process answers the same numbers: all of them come from the database and Redis, none from this process.
"""

from __future__ import annotations

import logging

from django.db.models import Count
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from apps.deployments.models import Deployment
from apps.jobs.choices import JobKind, JobStatus
from apps.jobs.models import Job
from apps.jobs.workers import queue_status
from apps.realtime.process_gauges import ProcessGauge, gauge_values
from sshexec.connection_stats import on_connection_change, open_connection_count

from ..round_stats import DURATION_BUCKETS_S, round_stats

logger = logging.getLogger(__name__)

ssh_connections = ProcessGauge("ssh_connections", read=open_connection_count)


def watch_ssh_connections() -> None:
    """Publish this process's open SSH connections whenever one opens or closes (TelemetryConfig.ready)."""
    on_connection_change(ssh_connections.changed)


def job_families():
    jobs = GaugeMetricFamily("pdcp_jobs", "Jobs in the database by kind and status", labels=["kind", "status"])
    counts = {(r["kind"], r["status"]): r["n"] for r in Job.objects.values("kind", "status").annotate(n=Count("id"))
              .order_by()}
    for kind in JobKind.values:
        for status in JobStatus.values:
            jobs.add_metric([kind, status], counts.pop((kind, status), 0))
    for (kind, status), n in sorted(counts.items()):  # kinds or statuses no longer in the choices
        jobs.add_metric([kind, status], n)
    yield jobs


def round_families():
    names = dict(Deployment.objects.values_list("pk", "name"))
    stats = round_stats(names)
    rounds = CounterMetricFamily("pdcp_scrape_rounds", "Scrape rounds finished", labels=["deployment"])
    duration = HistogramMetricFamily("pdcp_scrape_round_duration_seconds", "Duration of one scrape round",
                                     labels=["deployment"])
    targets = CounterMetricFamily("pdcp_scrape_targets", "Targets read by scrape rounds", labels=["deployment"])
    failed = CounterMetricFamily("pdcp_scrape_failed_targets", "Targets a scrape round could not read",
                                 labels=["deployment"])
    last_failed = GaugeMetricFamily("pdcp_scrape_last_round_failed_targets", "Targets the last round could not read",
                                    labels=["deployment"])
    last_at = GaugeMetricFamily("pdcp_scrape_last_round_timestamp_seconds", "When the last round finished",
                                labels=["deployment"])
    for pk, s in sorted(stats.items(), key=lambda item: names[item[0]]):
        label = [names[pk]]
        rounds.add_metric(label, s["rounds"])
        buckets = [(str(b), n) for b, n in zip(DURATION_BUCKETS_S, s["buckets"], strict=False)]
        duration.add_metric(label, [*buckets, ("+Inf", s["buckets"][-1])], sum_value=s["duration_s"])
        targets.add_metric(label, s["targets"])
        failed.add_metric(label, s["failed"])
        if s["last_failed"] is not None:
            last_failed.add_metric(label, s["last_failed"])
        if s["last_at"] is not None:
            last_at.add_metric(label, s["last_at"])
    yield from (rounds, duration, targets, failed, last_failed, last_at)


def gauge_families():
    for name, metric, text in (
            ("websocket_clients", "pdcp_websocket_clients", "Websocket clients connected, per web process"),
            ("ssh_connections", "pdcp_ssh_connections_open", "SSH connections open, per process")):
        family = GaugeMetricFamily(metric, text, labels=["process"])
        for process, value in sorted(gauge_values(name).items()):
            family.add_metric([process], value)
        yield family


def worker_families():
    workers = GaugeMetricFamily("pdcp_workers", "Live Celery workers consuming each queue", labels=["kind", "queue"])
    for row in queue_status():
        workers.add_metric([row["kind"], row["queue"]], row["workers"])
    yield workers


class ControlPlaneCollector:
    def collect(self):
        yield from job_families()
        redis_up = GaugeMetricFamily("pdcp_redis_up", "1 when the numbers kept in Redis could be read")
        try:
            from_redis = [*round_families(), *gauge_families(), *worker_families()]
        except Exception as exc:  # RegistryUnavailable, or the cache backend's own (redis-py) errors
            logger.warning("control plane metrics: Redis cannot be read: %s", exc)
            from_redis = []
        redis_up.add_metric([], 1 if from_redis else 0)
        yield redis_up
        yield from from_redis


def metrics_text() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControlPlaneCollector())
    return generate_latest(registry)
