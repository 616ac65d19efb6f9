"""Prometheus metrics of the proxy. Label children are cached so the hot path costs about a microsecond each;
in-flight and state gauges are read from the backend objects at scrape time (no hot-path cost at all)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0, 120.0, 300.0)

STATE_VALUES = ("healthy", "pending", "ejected", "draining")

# `_created` samples double the exposition for nothing a dashboard reads
disable_created_metrics()


class _BackendCollector:
    def __init__(self, pools):
        self.pools = pools

    def collect(self):
        inflight = GaugeMetricFamily("pdproxy_backend_inflight", "Requests in flight per backend instance",
                                     labels=["role", "backend"])
        state = GaugeMetricFamily("pdproxy_backend_state", "1 for the state the instance is in",
                                  labels=["role", "backend", "state"])
        healthy = GaugeMetricFamily("pdproxy_backend_healthy", "1 when the instance takes new requests",
                                    labels=["role", "backend"])
        for pool in self.pools():
            for b in pool.backends:
                inflight.add_metric([pool.role, b.addr], b.inflight)
                healthy.add_metric([pool.role, b.addr], 1 if b.state == "healthy" else 0)
                for s in STATE_VALUES:
                    state.add_metric([pool.role, b.addr, s], 1 if b.state == s else 0)
        yield inflight
        yield healthy
        yield state


class Metrics:
    def __init__(self, pools):
        r = self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("pdproxy_requests", "Client requests answered, by endpoint and status code",
                                ["endpoint", "code"], registry=r)
        self.errors = Counter("pdproxy_errors", "Failed or refused requests by cause", ["cause"], registry=r)
        self.ttft = Histogram("pdproxy_time_to_first_token_seconds",
                              "Request arrival to first Decode byte forwarded to the client",
                              ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.duration = Histogram("pdproxy_request_duration_seconds",
                                  "Request arrival to last byte sent", ["endpoint"],
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.prefill_duration = Histogram("pdproxy_prefill_duration_seconds",
                                          "Prefill leg: request sent to kv_transfer_params received",
                                          ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.backend_requests = Counter("pdproxy_backend_requests", "Legs sent to a backend, by outcome",
                                        ["role", "backend", "outcome"], registry=r)
        self.retries = Counter("pdproxy_retries", "Legs retried on another instance", ["role"], registry=r)
        self.edge_requests = Counter("pdproxy_edge_requests",
                                     "KV hand-overs per Prefill->Decode pair (Decode accepted the request)",
                                     ["prefill", "decode"], registry=r)
        self.edge_prompt_tokens = Counter("pdproxy_edge_prompt_tokens",
                                          "Prompt tokens whose KV went from this Prefill to this Decode",
                                          ["prefill", "decode"], registry=r)
        self.recomputes = Counter("pdproxy_recomputes", "Decode ended with stop_reason=recomputed; re-run",
                                  registry=r)
        self.rate_limited = Counter("pdproxy_rate_limited", "Requests refused with 429", ["scope"], registry=r)
        r.register(_BackendCollector(pools))
        self._cache: dict = {}

    # cached label children
    def _child(self, metric, *labels):
        key = (id(metric), labels)
        c = self._cache.get(key)
        if c is None:
            c = self._cache[key] = metric.labels(*labels)
        return c

    def request(self, endpoint: str, code: int):
        self._child(self.requests, endpoint, str(code)).inc()

    def error(self, cause: str):
        self._child(self.errors, cause).inc()

    def backend(self, role: str, addr: str, outcome: str):
        self._child(self.backend_requests, role, addr, outcome).inc()

    def edge(self, prefill: str, decode: str, prompt_tokens: int):
        self._child(self.edge_requests, prefill, decode).inc()
        if prompt_tokens:
            self._child(self.edge_prompt_tokens, prefill, decode).inc(prompt_tokens)

    def observe(self, metric, endpoint: str, seconds: float):
        self._child(metric, endpoint).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
