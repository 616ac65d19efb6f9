"""Routes a client request to the PD flow, the admin API, health or metrics, and owns the proxy's parts."""

from __future__ import annotations

import json
import math
import time

from .admin import Admin
from .backend_pool import HEALTHY, PENDING, BackendPool
from .balancer import Sticky, make_balancer
from .cache_aware import CacheAware
from .config import Config
from .health import HealthChecker
from .kv_index import exact_view
from .limits import RateLimiter
from .metrics import Metrics
from .pd_flow import PDFlow

GENERATE = ("/v1/completions", "/v1/chat/completions")
METRICS_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
CLIENT_CLOSED_REQUEST = 499  # the code label of a request whose client left before any answer (nginx's)
REFUSAL_CAUSES = {400: "bad_request", 413: "too_large", 414: "url_too_long", 431: "headers_too_large"}


class ProxyApp:
    def __init__(self, cfg: Config, initial_state: str = PENDING, routes_requests: bool = True):
        """routes_requests=False: the supervisor of --workers N, which keeps the pools and routes nothing (so it
        subscribes to no KV cache events and loads no tokenizer)."""
        self.cfg = cfg
        self.pools = {role: BackendPool(role, eject_after_5xx=cfg.eject_after_5xx,
                                        health_timeouts_to_eject=cfg.health_timeouts_to_eject)
                      for role in ("prefill", "decode")}
        for role, addrs in (("prefill", cfg.prefill), ("decode", cfg.decode)):
            pool = self.pools[role]
            for a in addrs:
                pool.add(a, state=initial_state)
        self.balancers = {}
        self.cache_aware = cache_aware = {}  # role -> its CacheAware policy, for /metrics
        for role, pool in self.pools.items():
            policy = cfg.role_policy(role)
            if policy == "cache_aware":
                inner = cache_aware[role] = CacheAware(
                    pool, cache_threshold=cfg.cache_threshold, balance_abs=cfg.balance_abs_threshold,
                    balance_rel=cfg.balance_rel_threshold, cache_chars=cfg.cache_chars,
                    exact=exact_view(cfg) if routes_requests else None)
            else:
                inner = make_balancer(policy, pool, cfg.hash_load_factor)
            self.balancers[role] = Sticky(inner, cfg.sticky_ttl) if cfg.sticky_header else inner
        self.metrics = Metrics(lambda: self.pools.values(), lambda: cache_aware)
        self.limiter = RateLimiter(cfg.rate_limit, cfg.rate_burst, cfg.client_rate_limit, cfg.client_rate_burst)
        self.health = HealthChecker(list(self.pools.values()), cfg.health_path, cfg.health_interval,
                                    cfg.health_timeout)
        self.flow = PDFlow(cfg, self.pools, self.balancers, self.metrics)
        self.admin = Admin(cfg.admin_token, self.pools, self.health, cfg.connect_timeout)
        self.admin_on_main = cfg.admin_listener is None  # else /admin/ is served only on that listener
        self.link = None  # in a worker of --workers N: its WorkerLink (worker_link.py), which the supervisor answers
        self._client_header = cfg.client_key[7:].lower() if cfg.client_key.startswith("header:") else None

    async def handle(self, req, conn):
        path = req.path
        if path in GENERATE:
            if req.method != "POST":
                conn.send_error(405, f"use POST on {path}", "MethodNotAllowed")
                return
            if self.limiter.enabled and not self._admit(req, conn):
                self.metrics.request(path, 429)
                return
            try:
                await self.flow.generate(req, conn, path)
            finally:
                # Counted however the handler ends: a client that hangs up as soon as it has read `[DONE]` cancels
                # it (connection_lost) while the Decode's stream is still ending, and was answered all the same.
                m = self.metrics
                m.request(path, conn.status_sent or CLIENT_CLOSED_REQUEST)
                m.observe(m.duration, path, time.perf_counter() - req.t0)
            return
        if path == "/v1/models":
            await self.flow.models(req, conn)
            return
        if path == "/v1/metaserver" or path.startswith("/v1/metaserver/"):  # the Decodes' calls (layerwise flow)
            await self.flow.metaserver(req, conn)
            return
        if path in ("/health", "/healthcheck"):
            self.health_answer(conn, path)
            return
        if path == "/metrics":
            if self.link is not None:
                await self.link.forward_metrics(conn)
                return
            conn.send_response(200, self.metrics.render(), METRICS_TYPE)
            return
        if path.startswith("/admin/") and self.admin_on_main:
            await (self.admin.handle(req, conn) if self.link is None else self.link.forward_admin(req, conn))
            return
        if path == "/reset_prefix_cache":  # the example proxy's unauthenticated fan-out
            conn.send_error(404, "use POST /admin/reset_prefix_cache (admin API, bearer token)", "NotFoundError")
            return
        conn.send_error(404, f"no route for {req.method} {path}", "NotFoundError")

    def listening(self, port: int):
        """The main listener is up on `port`: the layerwise flow's metaserver URL names it."""
        if self.flow.layerwise is not None:
            self.flow.layerwise.listening(port)

    def refused(self, status: int):
        """The HTTP server refused a request before it was routed (malformed, or over a RequestCaps cap)."""
        self.metrics.error(REFUSAL_CAUSES.get(status, "bad_request"))

    def _admit(self, req, conn) -> bool:
        client = req.headers.get(self._client_header, "") if self._client_header else req.client_ip
        refused = self.limiter.admit(client)
        if refused is None:
            return True
        scope, wait = refused
        self.metrics.rate_limit_refusal(scope)
        self.metrics.error("rate_limited")
        retry_after = str(max(1, math.ceil(wait))).encode()
        conn.send_error(429, f"rate limit exceeded ({scope}); retry after {retry_after.decode()}s",
                        "RateLimitError", extra=[(b"Retry-After", retry_after)])
        return False

    def health_answer(self, conn, path: str):
        p = self.pools["prefill"]
        d = self.pools["decode"]
        counts = {role: sum(1 for b in pool.backends if b.state == HEALTHY) for role, pool in self.pools.items()}
        ok = counts["prefill"] > 0 and counts["decode"] > 0
        payload = {"status": "ok" if ok else "unavailable",
                   "prefill_instances": counts["prefill"], "decode_instances": counts["decode"],
                   "request_num": sum(b.inflight for pool in self.pools.values() for b in pool.backends)}
        if not ok:
            payload["reason"] = "; ".join(pool.why_unavailable() for pool, n in
                                          ((p, counts["prefill"]), (d, counts["decode"])) if n == 0)
        conn.send_response(200 if ok else 503, json.dumps(payload).encode())
