"""One scrape round per deployment: read every running Process's metrics target in parallel, turn the readings
into live state, keep it (and a short history) in Redis through Django's cache, and push it to the page.

Redis, not the database: the state is rewritten every few seconds and only its last minutes matter; any web
process or worker reads the same keys (docs/reference-cluster.md, "Scaling out").
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from django.core.cache import cache

from apps.deployments.choices import ProcessState
from apps.deployments.models import Deployment, Process
from apps.deployments.topology import SpecError, spec_from_dict
from apps.realtime.push import emit

from .edge_ids import is_kv_edge
from .health import evaluate_round
from .history import record_round
from .live import TargetInfo, history_point, host_port, live_state
from .models import InstanceHealth, InstanceState
from .round_stats import record_round_stats
from .scrape import OK, TargetReading, fetch_text, read_target
from .selectors import (
    HISTORY_LEN,
    LIVE_TTL_S,
    aggregated,
    busy,
    history_entry,
    history_key,
    live_key,
    push_view,
)

logger = logging.getLogger(__name__)

SCRAPED_ROLES = ("prefill", "decode", "proxy", "kv_pool")
MAX_PARALLEL = 16
LOCK_TTL_S = 15  # one round of a deployment at a time: overlapping rounds would make nonsense rates


def scrape_targets(processes: list[Process], *, pool_backend: str = "mooncake",
                   launch_profile: str = "") -> list[TargetInfo]:
    """Where each running process exposes /metrics: engines and the proxy on their API port, mooncake_master on
    its metrics port (its second port; the first is RPC). Headless engine processes (internal DP secondaries) have
    no API server and no port: their ranks are counted by their instance's head. A MemCache MetaService's metrics
    page has no format we know (docs/ascend-pd-launch-facts.md §3.4): it is not read. MindIE's coordinator (the
    proxy of launch_profile mindie) serves its metrics on its manage port, the second (docs/mindie.md)."""
    out = []
    for p in processes:
        if p.role not in SCRAPED_ROLES or not p.ports:
            continue
        if p.role == "kv_pool" and pool_backend != "mooncake":
            continue
        api_port = p.ports[0]
        second = p.role == "kv_pool" or (p.role == "proxy" and launch_profile == "mindie")
        metrics_port = p.ports[1] if second and len(p.ports) > 1 else api_port
        out.append(TargetInfo(key=p.key, role=p.role, instance=p.instance, address=p.address, port=api_port,
                              metrics_url=f"http://{host_port(p.address, metrics_port)}/metrics"))
    return out


def read_all(targets: list[TargetInfo], *, fetch=fetch_text) -> list[TargetReading]:
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(targets))) as pool:
        return list(pool.map(lambda t: read_target(t.key, t.role, t.metrics_url, fetch=fetch), targets))


def _active_spec(deployment: Deployment):
    revision = deployment.active_revision
    if revision is None:
        return None
    try:
        return spec_from_dict(revision.spec)
    except (SpecError, KeyError, TypeError, ValueError, AttributeError):
        return None


def kv_bytes_per_token(deployment: Deployment, spec=None) -> int | None:
    spec = spec or _active_spec(deployment)
    try:
        return spec.model.profile.kv_bytes_per_token if spec else None
    except AttributeError:
        return None


def pool_backend(spec) -> str:
    pool = getattr(spec, "kv_pool", None)
    return getattr(pool, "backend", "mooncake") if pool else "mooncake"


def deployment_scrape(deployment: Deployment, processes: list[Process], *, fetch=fetch_text,
                      now=time.time) -> dict | None:
    """One round for one deployment; None when another round of it is still running."""
    lock, token = f"telemetry:lock:{deployment.pk}", uuid.uuid4().hex
    if not cache.add(lock, token, timeout=LOCK_TTL_S):
        return None
    started = time.monotonic()
    try:
        spec = _active_spec(deployment)
        targets = scrape_targets(processes, pool_backend=pool_backend(spec),
                                 launch_profile=getattr(spec, "launch_profile", ""))
        readings = read_all(targets, fetch=fetch)
        state = live_state(deployment_id=deployment.pk, at=now(), targets=targets, readings=readings,
                           kv_bytes_per_token=kv_bytes_per_token(deployment, spec),
                           previous=cache.get(live_key(deployment.pk)))
        state["health"] = evaluate_round(deployment, readings, now=state["at"])
        point = history_entry(history_point(state), state["instances"])
        history = (cache.get(history_key(deployment.pk)) or [])[-(HISTORY_LEN - 1):] + [point]
        cache.set_many({live_key(deployment.pk): stored_state(state), history_key(deployment.pk): history},
                       timeout=LIVE_TTL_S)
    finally:
        if cache.get(lock) == token:  # a round that outlived its lock must not release the next round's
            cache.delete(lock)
    record_round(deployment, state)
    record_round_stats(deployment_id=deployment.pk, duration_s=time.monotonic() - started, targets=len(readings),
                       failed=sum(r.status != OK for r in readings))
    emit(f"deployment-{deployment.pk}", {"type": "live", "live": push_view(state, point)}, throttle=True)
    return state


def stored_state(state: dict) -> dict:
    """The live state as Redis keeps it: a large mesh's idle P->D pairs are left out (the next round's rates come
    from the targets' readings, and a pair not listed reads as idle)."""
    if not aggregated(state["instances"]):
        return state
    return {**state, "edges": {e: d for e, d in state["edges"].items() if not is_kv_edge(e) or busy(d)}}


RUNNING_FIELDS = ("deployment_id", "key", "role", "instance", "address", "ports")


def deployments_to_scrape() -> list[int]:
    """Every deployment with a running process, and every one whose instances still show a state other than stopped
    (its processes all stopped since: one more round ends them stopped)."""
    running = set(Process.objects.filter(state=ProcessState.RUNNING).values_list("deployment_id", flat=True))
    quiet = set(InstanceHealth.objects.exclude(state=InstanceState.STOPPED).values_list("deployment_id", flat=True))
    return sorted(running | quiet)


def scrape_deployment(deployment_id: int, *, fetch=fetch_text) -> dict | None:
    """One round of one deployment: its running processes scraped, or only a health round when none runs."""
    deployment = Deployment.objects.filter(pk=deployment_id).defer("proxy_admin_token").first()
    if deployment is None:
        return None
    running = list(Process.objects.filter(deployment_id=deployment_id, state=ProcessState.RUNNING)
                   .only(*RUNNING_FIELDS))
    if not running:
        evaluate_round(deployment, [])
        return None
    return deployment_scrape(deployment, running, fetch=fetch)


def scrape_running_deployments(*, fetch=fetch_text) -> dict[int, dict | None]:
    """Every deployment's round in this process, one after the other (targets of one in parallel). Beat does not
    call this: it sends one task per deployment (tasks.py), so several telemetry workers share the rounds."""
    out = {}
    for deployment_id in deployments_to_scrape():
        try:
            out[deployment_id] = scrape_deployment(deployment_id, fetch=fetch)
        except Exception:  # one deployment's trouble (Redis hiccup, odd spec) must not starve the others
            logger.exception("telemetry scrape of deployment %s failed", deployment_id)
            out[deployment_id] = None
    return out
