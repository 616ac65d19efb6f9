"""Admission control: caps on a request's size, and token buckets (global and per client) that answer how long
to wait when empty."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestCaps:
    """What one client request may hold in the proxy's memory. Over a cap the answer is 414 (URL), 431 (headers)
    or 413 (body) and the connection is closed."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_url_bytes: int = 8 * 1024
    max_header_count: int = 100
    max_header_bytes: int = 64 * 1024  # all headers, each counted as name + value + 4 (": ", CRLF)
    max_header_line_bytes: int = 16 * 1024  # one header


class TokenBucket:
    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: float, now: float | None = None):
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = self.burst
        self.stamp = time.monotonic() if now is None else now

    def take(self, now: float) -> float:
        """Take one token. Returns 0.0 when admitted, else the seconds until a token will be there."""
        tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if tokens >= 1.0:
            self.tokens = tokens - 1.0
            return 0.0
        self.tokens = tokens
        return (1.0 - tokens) / self.rate


class RateLimiter:
    """Global bucket plus one bucket per client key. A rate of 0 switches that scope off."""

    def __init__(self, rate: float, burst: float, client_rate: float, client_burst: float,
                 max_clients: int = 50_000):
        self.global_bucket = TokenBucket(rate, burst or rate) if rate > 0 else None
        self.client_rate = client_rate
        self.client_burst = client_burst or client_rate
        self.clients: dict[str, TokenBucket] = {}
        self.max_clients = max_clients

    @property
    def enabled(self) -> bool:
        return self.global_bucket is not None or self.client_rate > 0

    def admit(self, client: str) -> tuple[str, float] | None:
        """None when admitted, else (scope, retry_after_seconds)."""
        now = time.monotonic()
        if self.client_rate > 0:
            bucket = self.clients.get(client)
            if bucket is None:
                if len(self.clients) >= self.max_clients:
                    self._prune(now)
                bucket = self.clients[client] = TokenBucket(self.client_rate, self.client_burst, now)
            wait = bucket.take(now)
            if wait:
                return "client", wait
        if self.global_bucket is not None:
            wait = self.global_bucket.take(now)
            if wait:
                return "global", wait
        return None

    def _prune(self, now: float):
        # buckets that have refilled completely carry no state worth keeping
        full = [k for k, b in self.clients.items() if b.tokens + (now - b.stamp) * b.rate >= b.burst]
        for k in full:
            del self.clients[k]
        if len(self.clients) >= self.max_clients:
            self.clients.clear()
