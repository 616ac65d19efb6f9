"""Which Celery workers are alive, per queue: each worker writes its name, its queues and the time into one entry
of Django's cache (Redis, under the installation's namespace) every REFRESH_SECONDS (controlplane/celery.py starts
that); an entry older than STALE_SECONDS counts as gone. A pending job reads this to say whether anything will run it."""

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 10.0
STALE_SECONDS = 3 * REFRESH_SECONDS
REGISTRY_KEY = "job-workers"  # in Django's cache, so under the installation's namespace like every Redis use
LOCK_KEY = "job-workers:lock"
LOCK_WAIT_S = 2.0


class RegistryUnavailable(Exception):
    """The registry could not be read or written (Redis down or unreachable)."""


@dataclass(frozen=True)
class LiveWorker:
    name: str
    queues: tuple[str, ...]
    seen: float  # unix time of its last refresh


def _read() -> dict:
    try:
        registry = cache.get(REGISTRY_KEY)
    except Exception as exc:  # the cache backend's own error types (redis-py's) stay behind Django's cache
        raise RegistryUnavailable(str(exc)) from exc
    return registry if isinstance(registry, dict) else {}


def _update(change) -> None:
    """Read-modify-write of the one registry entry, serialised by a short lock (cache.add is SET NX) so that two
    workers refreshing at once never drop each other; a lock left by a dead worker expires by itself."""
    token = uuid.uuid4().hex
    deadline = time.monotonic() + LOCK_WAIT_S
    try:
        while not cache.add(LOCK_KEY, token, timeout=5):
            if time.monotonic() > deadline:
                raise RegistryUnavailable("the worker registry stays locked")
            time.sleep(0.05)
        try:
            registry = _read()
            change(registry)
            cache.set(REGISTRY_KEY, registry, timeout=None)
        finally:
            if cache.get(LOCK_KEY) == token:
                cache.delete(LOCK_KEY)
    except RegistryUnavailable:
        raise
    except Exception as exc:
        raise RegistryUnavailable(str(exc)) from exc


def _drop_stale(registry: dict, now: float) -> None:
    for name in [n for n, e in registry.items() if not isinstance(e, dict) or now - e.get("seen", 0) > STALE_SECONDS]:
        del registry[name]


def worker_seen(name: str, queues, *, now: float | None = None) -> None:
    now = now if now is not None else time.time()

    def change(registry):
        registry[name] = {"queues": sorted(queues), "seen": now}
        _drop_stale(registry, now)
    _update(change)


def worker_gone(name: str) -> None:
    _update(lambda registry: registry.pop(name, None))


def live_workers(*, now: float | None = None) -> list[LiveWorker]:
    """The workers seen in the last STALE_SECONDS. Raises RegistryUnavailable."""
    now = now if now is not None else time.time()
    live = []
    for name, entry in _read().items():
        try:
            worker = LiveWorker(name, tuple(entry["queues"]), float(entry["seen"]))
        except (KeyError, TypeError, ValueError):
            continue
        if now - worker.seen <= STALE_SECONDS:
            live.append(worker)
    return sorted(live, key=lambda w: w.name)


def queue_status(workers: list[LiveWorker] | None = None) -> list[dict]:
    """One entry per queue of this installation: kind, name, live worker count, their names, the latest refresh."""
    workers = live_workers() if workers is None else workers
    rows = []
    for kind, queue in settings.PDCP_QUEUES.items():
        consuming = [w for w in workers if queue in w.queues]
        rows.append({"kind": kind, "queue": queue, "workers": len(consuming),
                     "names": [w.name for w in consuming],
                     "last_seen": max((w.seen for w in consuming), default=None)})
    return rows


class WorkerBeacon:
    """Refreshes one worker's entry from a daemon thread until stop()."""

    def __init__(self, name: str, queues):
        self.name, self.queues = name, tuple(queues)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pdcp-worker-beacon", daemon=True)

    def start(self) -> "WorkerBeacon":
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            try:
                worker_seen(self.name, self.queues)
            except RegistryUnavailable as exc:  # Redis down: the worker goes on, its entry just ages
                logger.warning("worker registry refresh failed: %s", exc)
            if self._stop.wait(REFRESH_SECONDS):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            worker_gone(self.name)
        except RegistryUnavailable as exc:
            logger.warning("worker registry: could not remove %s: %s", self.name, exc)
