"""Prometheus metrics of the proxy.

The hot path only adds to plain Python numbers held by cached label children (no lock, no prometheus_client
call: its Counter.inc and Histogram.observe take a mutex and cost several times more); everything is turned
into Prometheus families at scrape time, where prometheus_client renders them. The proxy is one thread on
one event loop, so nothing else writes these numbers concurrently. In-flight and state gauges are read from
the backend objects at scrape time too."""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0, 120.0, 300.0)

STATE_VALUES = ("healthy", "pending", "ejected", "draining")

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


class _CacheAwareCollector:
    """What the cache_aware policies decided and hold, read from them at scrape time."""

    def __init__(self, policies):
        self.policies = policies  # () -> {role: CacheAware}

    def collect(self):
        policies = self.policies()
        if not policies:
            return
        picks = CounterMetricFamily("pdproxy_cache_aware_picks", "cache_aware choices by reason: cache (the "
                                    "instance held the prompt's prefix), fewest (the emptiest), balance (the least "
                                    "loaded, load out of balance)", labels=["role", "reason"])
        held = GaugeMetricFamily("pdproxy_cache_aware_held_chars", "Routed prompt characters cache_aware "
                                 "remembers per instance", labels=["role", "backend"])
        kv_blocks = GaugeMetricFamily("pdproxy_cache_aware_kv_blocks", "Blocks an instance's KV cache events say "
                                      "its prefix cache holds (instances whose publisher is connected)",
                                      labels=["role", "backend"])
        for role, policy in policies.items():
            for reason, n in policy.routed.items():
                picks.add_metric([role, reason], n)
            for addr, chars in policy.held_chars().items():
                held.add_metric([role, addr], chars)
            for addr, blocks in policy.kv_blocks().items():
                kv_blocks.add_metric([role, addr], blocks)
        yield picks
        yield held
        yield kv_blocks


class _CounterChild:
    __slots__ = ("value",)

    def __init__(self):
        self.value = 0.0

    def inc(self, amount: float = 1.0):
        self.value += amount


class _HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple):
        self.bounds = bounds  # finite upper bounds; counts has one more slot for +Inf
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float):
        self.counts[bisect_left(self.bounds, value)] += 1  # `le` buckets: value <= bound
        self.sum += value


class LocalCounter:
    """A counter family: labels(...) -> child with inc(); a family without labels is its own only child."""

    def __init__(self, name: str, doc: str, labelnames=()):
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self.children: dict[tuple, _CounterChild] = {}
        if not self.labelnames:
            self._only = self.children[()] = _CounterChild()

    def labels(self, *values: str) -> _CounterChild:
        c = self.children.get(values)
        if c is None:
            c = self.children[values] = _CounterChild()
        return c

    def inc(self, amount: float = 1.0):
        self._only.value += amount

    def family(self):
        f = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, c in self.children.items():
            f.add_metric(list(values), c.value)
        return f


class LocalHistogram:
    def __init__(self, name: str, doc: str, labelnames, buckets):
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self.les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self.children: dict[tuple, _HistogramChild] = {}

    def labels(self, *values: str) -> _HistogramChild:
        c = self.children.get(values)
        if c is None:
            c = self.children[values] = _HistogramChild(self.bounds)
        return c

    def family(self):
        f = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, c in self.children.items():
            acc, buckets = 0, []
            for le, n in zip(self.les, c.counts, strict=True):
                acc += n
                buckets.append((le, float(acc)))
            f.add_metric(list(values), buckets, c.sum)
        return f


class _LocalCollector:
    def __init__(self, metrics: list):
        self.metrics = metrics

    def collect(self):
        for m in self.metrics:
            yield m.family()


class Metrics:
    def __init__(self, pools, cache_aware=dict):
        r = self.registry = CollectorRegistry(auto_describe=False)
        self.requests = LocalCounter("pdproxy_requests", "Client requests answered, by endpoint and status code",
                                     ["endpoint", "code"])
        self.errors = LocalCounter("pdproxy_errors", "Failed or refused requests by cause", ["cause"])
        self.ttft = LocalHistogram("pdproxy_time_to_first_token_seconds",
                                   "Request arrival to first Decode byte forwarded to the client",
                                   ["endpoint"], LATENCY_BUCKETS)
        self.duration = LocalHistogram("pdproxy_request_duration_seconds", "Request arrival to last byte sent",
                                       ["endpoint"], LATENCY_BUCKETS)
        self.prefill_duration = LocalHistogram("pdproxy_prefill_duration_seconds",
                                               "Prefill leg: request sent to kv_transfer_params received",
                                               ["endpoint"], LATENCY_BUCKETS)
        self.backend_requests = LocalCounter("pdproxy_backend_requests", "Legs sent to a backend, by outcome",
                                             ["role", "backend", "outcome"])
        self.retries = LocalCounter("pdproxy_retries", "Legs retried on another instance", ["role"])
        self.edge_requests = LocalCounter("pdproxy_edge_requests",
                                          "KV hand-overs per Prefill->Decode pair (Decode accepted the request)",
                                          ["prefill", "decode"])
        self.edge_prompt_tokens = LocalCounter("pdproxy_edge_prompt_tokens",
                                               "Prompt tokens whose KV went from this Prefill to this Decode",
                                               ["prefill", "decode"])
        self.recomputes = LocalCounter("pdproxy_recomputes", "Decode ended with stop_reason=recomputed; re-run")
        self.rate_limited = LocalCounter("pdproxy_rate_limited", "Requests refused with 429", ["scope"])
        self.metaserver_calls = LocalCounter("pdproxy_metaserver_calls", "Layerwise flow: metaserver calls by where "
                                             "their request was: this worker, another worker (--workers N), none "
                                             "(no known token), or refused (not from the request's Decode, or not "
                                             "naming its request id or host)", ["found"])
        # exposition order: as declared (what prometheus_client's own Counter/Histogram objects gave)
        self.local = [self.requests, self.errors, self.ttft, self.duration, self.prefill_duration,
                      self.backend_requests, self.retries, self.edge_requests, self.edge_prompt_tokens,
                      self.recomputes, self.rate_limited, self.metaserver_calls]
        r.register(_LocalCollector(self.local))
        r.register(_BackendCollector(pools))
        r.register(_CacheAwareCollector(cache_aware))

    # workers (supervisor.py): each worker's counts travel as a snapshot; the supervisor sums them into one
    def snapshot(self) -> dict:
        out = {}
        for m in self.local:
            if isinstance(m, LocalHistogram):
                out[m.name] = [[list(k), c.counts, c.sum] for k, c in m.children.items()]
            else:
                out[m.name] = [[list(k), c.value] for k, c in m.children.items()]
        return out

    def absorb(self, snapshot: dict) -> None:
        for m in self.local:
            for row in snapshot.get(m.name, ()):
                child = m.labels(*row[0])
                if isinstance(m, LocalHistogram):
                    if len(row[1]) == len(child.counts):
                        child.counts = [a + b for a, b in zip(child.counts, row[1], strict=True)]
                        child.sum += row[2]
                else:
                    child.value += row[1]

    # The hot path's calls: each adds to a label child the family caches, keyed by the label values. The
    # per-request ones look the child up themselves (labels() only makes a missing one): a Python call less
    # per count, and a request makes about ten.
    def request(self, endpoint: str, code: int):
        key = (endpoint, str(code))
        child = self.requests.children.get(key)
        if child is None:
            child = self.requests.labels(*key)
        child.value += 1

    def error(self, cause: str):
        self.errors.labels(cause).value += 1

    def backend(self, role: str, addr: str, outcome: str):
        key = (role, addr, outcome)
        child = self.backend_requests.children.get(key)
        if child is None:
            child = self.backend_requests.labels(*key)
        child.value += 1

    def retry(self, role: str):
        self.retries.labels(role).value += 1

    def rate_limit_refusal(self, scope: str):
        self.rate_limited.labels(scope).value += 1

    def recompute(self):
        self.recomputes.inc()

    def edge(self, prefill: str, decode: str, prompt_tokens: int):
        key = (prefill, decode)
        child = self.edge_requests.children.get(key)
        if child is None:
            child = self.edge_requests.labels(*key)
        child.value += 1
        if prompt_tokens:
            self.edge_prompt_tokens.labels(*key).value += prompt_tokens

    def observe(self, metric: LocalHistogram, endpoint: str, seconds: float):
        child = metric.children.get((endpoint,))
        if child is None:
            child = metric.labels(endpoint)
        child.counts[bisect_left(child.bounds, seconds)] += 1  # as _HistogramChild.observe
        child.sum += seconds

    def render(self) -> bytes:
        return generate_latest(self.registry)
