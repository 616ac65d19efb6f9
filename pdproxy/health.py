"""Active health checks: probe every instance on an interval; bring pending/ejected ones in, eject dead ones."""

from __future__ import annotations

import asyncio
import logging
from typing import NamedTuple

from .backend_pool import Backend, BackendPool
from .http_client import BackendError, http_get

log = logging.getLogger("pdproxy.health")


class ProbeFailure(NamedTuple):
    reason: str
    unanswered: bool  # no answer within the timeout: busy or dead, unlike a refused connection or an error status


async def probe(backend: Backend, path: str, timeout: float) -> ProbeFailure | None:
    """None when the instance answered 2xx on `path`, else why it did not."""
    try:
        status, _ = await http_get(backend, path, timeout)
    except BackendError as exc:
        return ProbeFailure(f"health check: {exc.reason}", exc.kind == "timeout")
    if 200 <= status < 300:
        return None
    return ProbeFailure(f"health check {path} answered HTTP {status}", False)


class HealthChecker:
    def __init__(self, pools: list[BackendPool], path: str, interval: float, timeout: float):
        self.pools = pools
        self.path = path
        self.interval = interval
        self.timeout = timeout
        self._task = None

    async def check(self, pool: BackendPool, b: Backend):
        failure = await probe(b, self.path, self.timeout)
        if not b.removed:
            pool.report_probe(b, failure.reason if failure else None, bool(failure and failure.unanswered))

    async def check_all(self):
        jobs = [self.check(pool, b) for pool in self.pools for b in list(pool.backends)]
        if jobs:
            await asyncio.gather(*jobs, return_exceptions=True)

    async def run(self):
        while True:
            try:
                await self.check_all()
            except Exception:  # the checker must never die
                log.exception("health check round failed")
            await asyncio.sleep(self.interval)

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self.run())

    def stop(self):
        if self._task is not None:
            self._task.cancel()


__all__ = ["HealthChecker", "ProbeFailure", "probe"]
