"""Sustained HTTP load: N clients, each sending its next GET as soon as the last one is answered, for a fixed
time; what came back (req/s, latency percentiles, errors, largest body)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    max_bytes: int = 0
    first_error: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def row(self) -> dict:
        return {"requests": self.requests, "rps": round(self.rps, 1), "p50_ms": round(self.percentile(0.50), 1),
                "p99_ms": round(self.percentile(0.99), 1), "errors": self.errors, "max_bytes": self.max_bytes}


async def _client(session, url: str, until: float, result: LoadResult) -> None:
    while time.monotonic() < until:
        start = time.monotonic()
        try:
            async with session.get(url) as response:
                body = await response.read()
                ok = response.status == 200
                status = response.status
        except Exception as exc:  # a refused or reset connection is an error of the run, not of the test
            ok, body, status = False, b"", repr(exc)
        result.requests += 1
        result.latencies_ms.append((time.monotonic() - start) * 1000)
        result.max_bytes = max(result.max_bytes, len(body))
        if not ok:
            result.errors += 1
            result.first_error = result.first_error or f"{status}: {body[:200]!r}"


async def _sustained(url: str, headers: dict, clients: int, seconds: float) -> LoadResult:
    import aiohttp

    result = LoadResult()
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        await asyncio.gather(*(_client(session, url, start + seconds, result) for _ in range(clients)))
        result.seconds = time.monotonic() - start
    return result


def sustained_get(url: str, *, headers: dict, clients: int, seconds: float) -> LoadResult:
    return asyncio.run(_sustained(url, headers, clients, seconds))
