"""Prometheus HTTP service discovery (http_sd_config): every running process of every deployment that has a metrics
page, as the control plane's own scraper reads it (services.scrape_targets: engines and the proxy on their API port,
mooncake_master on its metrics port), plus the services with no Prometheus page of their own (the memcached store
servers, a MemCache pool) labelled exporter="none", so a scrape config can drop them or hand their address to an
exporter. docs/prometheus.md has the scrape config and what every label means.
"""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import urlsplit

from django.db.models import Q

from apps.deployments.choices import ProcessState
from apps.deployments.models import Process, Revision

from ..live import host_port
from ..services import scrape_targets

METRICS_PATH = "/metrics"  # Prometheus' default; a target elsewhere says so with __metrics_path__
SERVICE_ROLES = ("store", "kv_pool")


def sd_processes(queryset=None):
    """The running processes, with their deployment and cluster, in one query."""
    queryset = Process.objects.all() if queryset is None else queryset
    return (queryset.filter(state=ProcessState.RUNNING).select_related("deployment__cluster")
            .defer("command", "deployment__proxy_admin_token").order_by("deployment__name", "key"))


def revision_facts(processes) -> tuple[dict[int, int], dict[int, str]]:
    """{revision id: number} of the processes' revisions and {deployment id: KV pool backend} of each deployment's
    active revision (what scrape_targets is told), in one query that loads no spec."""
    revision_ids = {p.revision_id for p in processes if p.revision_id}
    deployment_ids = {p.deployment_id for p in processes}
    numbers, backends = {}, {}
    for pk, deployment_id, number, active, backend in Revision.objects.filter(
            Q(pk__in=revision_ids) | Q(deployment_id__in=deployment_ids, is_active=True)).values_list(
            "pk", "deployment_id", "number", "is_active", "spec__kv_pool__backend"):
        numbers[pk] = number
        if active:
            backends[deployment_id] = backend if isinstance(backend, str) else "mooncake"
    return numbers, backends


def labels_of(process: Process, numbers: dict[int, int]) -> dict[str, str]:
    number = numbers.get(process.revision_id)
    return {"cluster": process.deployment.cluster.name, "deployment": process.deployment.name,
            "revision": "" if number is None else str(number), "role": process.role,
            "instance": process.instance or process.key, "process": process.key, "node": process.node_name}


def sd_target_groups(processes) -> list[dict]:
    """One target group per process: [{"targets": ["host:port"], "labels": {...}}], ordered by deployment and key."""
    processes = list(processes)
    by_deployment = defaultdict(list)
    for p in processes:
        by_deployment[p.deployment_id].append(p)
    numbers, backends = revision_facts(processes)
    groups = {}
    for deployment_id, rows in by_deployment.items():
        scraped = {t.key: t for t in scrape_targets(rows, pool_backend=backends.get(deployment_id, "mooncake"))}
        for p in rows:
            target = scraped.get(p.key)
            if target is not None:
                url = urlsplit(target.metrics_url)
                labels = labels_of(p, numbers)
                if url.path != METRICS_PATH:
                    labels["__metrics_path__"] = url.path
                groups[p.pk] = {"targets": [url.netloc], "labels": labels}
            elif p.role in SERVICE_ROLES and p.ports:
                # memcached's only port, or a MemCache MetaService's metrics_url port (its page's format is unknown).
                groups[p.pk] = {"targets": [host_port(p.address, p.ports[-1])],
                                "labels": {**labels_of(p, numbers), "exporter": "none"}}
    return [groups[p.pk] for p in processes if p.pk in groups]
