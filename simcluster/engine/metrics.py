"""Prometheus metrics with vLLM's names and labels (model_name, engine), plus simcluster KV-transfer ones.

simcluster additions (vllm-ascend's Mooncake connectors export none, docs/ascend-pd-launch-facts.md §4):
  simcluster:kv_transfer_bytes_total{peer,direction}        bytes really moved over TCP (scaled down)
  simcluster:kv_transfer_model_bytes_total{peer,direction}  bytes the real model would move (x kv_scale)
  simcluster:kv_transfers_total{peer,direction,outcome}     transfers; outcome ok | checksum_error | error
  simcluster:kv_held_requests / simcluster:kv_held_bytes    P-side KV waiting to be pulled
  simcluster:kv_freed_total{reason}                         pulled | timeout
  simcluster:store_blocks_total{tier,op}                    KV pool blocks: tier = the AscendStoreConnector backend
                                                            (mooncake | memcache), op = load | backup
vLLM's own: vllm:prompt_tokens_total (every prompt token) and vllm:prompt_tokens_by_source_total{source}:
local_compute (prefilled here), local_cache_hit (this engine's prefix cache), external_kv_transfer (a Decode's
tokens pulled from / pushed by its Prefill, or loaded from the KV pool), vllm:prefix_cache_{queries,hits}_total
(tokens; the local prefix cache),
vllm:external_prefix_cache_{queries,hits}_total (tokens a KV connector was asked for / supplied: the pool, and
on a Decode the tokens MooncakeConnectorV1 pulled), vllm:request_success_total{finished_reason} with every reason
of vLLM's FinishReason. Every series of an engine core exists, at zero, from the start (add_engine), as in
vLLM; help texts and histogram buckets are vLLM 0.32's (measured, docs/real-engine.md). vLLM's *_created
series are left out (disable_created_metrics): nothing reads them.
peer = the other side's API endpoint "host:port"; direction = send (P) | recv (D).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0]
L = ["model_name", "engine"]
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vllm/v1/engine/__init__.py FinishReason
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")  # vllm:prompt_tokens_by_source


class EngineMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", L, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", L,
                              registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", L, registry=r)
        self.prompt_tokens_by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                                               L + ["source"], registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", L,
                                         registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               L + ["finished_reason"], registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", L,
                                      registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", L, registry=r)
        self.external_queries = Counter(
            "vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance "
            "cache sharing, in terms of number of queried tokens.", L, registry=r)
        self.external_hits = Counter(
            "vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache "
            "sharing, in terms of number of cached tokens.", L, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", L, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L,
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", L,
                             buckets=E2E_BUCKETS, registry=r)
        peer = ["peer", "direction"]
        self.kv_bytes = Counter("simcluster:kv_transfer_bytes", "KV bytes moved over TCP (scaled).", peer,
                                registry=r)
        self.kv_model_bytes = Counter("simcluster:kv_transfer_model_bytes",
                                      "KV bytes the real model would move.", peer, registry=r)
        self.kv_transfers = Counter("simcluster:kv_transfers", "KV transfers.", peer + ["outcome"], registry=r)
        self.kv_held_requests = Gauge("simcluster:kv_held_requests", "Prefilled KV awaiting a pull.",
                                      registry=r)
        self.kv_held_bytes = Gauge("simcluster:kv_held_bytes", "Bytes of KV awaiting a pull.", registry=r)
        self.kv_freed = Counter("simcluster:kv_freed", "Held KV freed.", ["reason"], registry=r)
        self.store_blocks = Counter("simcluster:store_blocks", "KV blocks loaded from / backed up to stores.",
                                    ["tier", "op"], registry=r)

    def add_engine(self, **labels: str) -> None:
        """Every series of one engine core (model_name, engine) at zero, as vLLM exports them before any request:
        a reader sees 0, not a missing series."""
        for family in (self.running, self.waiting, self.kv_usage, self.prompt_tokens, self.generation_tokens,
                       self.prefix_queries, self.prefix_hits, self.external_queries, self.external_hits,
                       self.preemptions, self.ttft, self.itl, self.e2e):
            family.labels(**labels)
        for source in PROMPT_SOURCES:
            self.prompt_tokens_by_source.labels(**labels, source=source)
        for reason in FINISH_REASONS:
            self.success.labels(**labels, finished_reason=reason)
