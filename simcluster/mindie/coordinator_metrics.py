"""The coordinator's Prometheus metrics (manage port /metrics).

MindIE's service metric names, unprefixed as MindIE exports them (`request_generation_tokens_sum` is what
MindIE-Motor's ras_starter.py reads from the coordinator's /metrics), plus the simulator's own routing counter:
  request_received_total, request_success_total, request_failed_total, num_requests_running,
  prompt_tokens_total, generation_tokens_total, request_prompt_tokens (histogram),
  request_generation_tokens (histogram), time_to_first_token_seconds, e2e_request_latency_seconds,
  simcluster:mindie_routed_total{role, instance, pod}: requests each P and D server pod served.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()

TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
SECONDS_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0]


class CoordinatorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.received = Counter("request_received", "Requests the coordinator received.", registry=r)
        self.success = Counter("request_success", "Requests answered completely.", registry=r)
        self.failed = Counter("request_failed", "Requests that failed.", registry=r)
        self.running = Gauge("num_requests_running", "Requests being served.", registry=r)
        self.prompt_tokens = Counter("prompt_tokens", "Prompt tokens of answered requests.", registry=r)
        self.generation_tokens = Counter("generation_tokens", "Tokens generated.", registry=r)
        self.request_prompt = Histogram("request_prompt_tokens", "Prompt tokens per request.",
                                        buckets=TOKEN_BUCKETS, registry=r)
        self.request_generation = Histogram("request_generation_tokens", "Generated tokens per request.",
                                            buckets=TOKEN_BUCKETS, registry=r)
        self.ttft = Histogram("time_to_first_token_seconds", "Time to first token.", buckets=SECONDS_BUCKETS,
                              registry=r)
        self.e2e = Histogram("e2e_request_latency_seconds", "End to end request latency.", buckets=SECONDS_BUCKETS,
                             registry=r)
        self.routed = Counter("simcluster:mindie_routed", "Requests each server pod served.",
                              ["role", "instance", "pod"], registry=r)

    def answered(self, usage: dict | None) -> None:
        self.success.inc()
        if usage:
            prompt, generated = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            self.prompt_tokens.inc(prompt)
            self.generation_tokens.inc(generated)
            self.request_prompt.observe(prompt)
            self.request_generation.observe(generated)
