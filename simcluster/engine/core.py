"""One engine core (one DP rank): continuous batching of prefill and decode steps on simulated time.

Each step admits waiting requests up to --max-num-seqs, prefills the new ones (time from the cost
model, minus what a KV store supplied), else decodes one token for every running request at the
inter-token latency of the current batch size. The step loop is the only "NPU": a hang fault
pauses it while /health keeps answering.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from simcluster import profiles
from simcluster.engine import textgen

FINISHED = object()


@dataclass
class Request:
    request_id: str
    tokens: list[int]
    max_tokens: int
    need_prefill_tokens: int  # 0 when KV arrived from a Prefill
    load_tokens: int = 0  # tokens whose KV came from a store (cheap to load)
    external_tokens: int = 0  # tokens whose KV a connector supplied (pulled from a Prefill, loaded from a store)
    arrival: float = field(default_factory=time.monotonic)
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    finish_reason: str | None = None
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    script: list[tuple[int, str]] | None = None  # an answer-book reply as (token id, piece); None: word salad
    on_prefilled: list = field(default_factory=list)  # callbacks run when the first token is out
    ignore_eos: bool = False  # vLLM's sampling param: run to max_tokens (benchmarks' perf mode sends it)

    @property
    def stop_at(self) -> int:
        if self.ignore_eos:
            return self.max_tokens
        natural = len(self.script) if self.script else textgen.natural_length(self.tokens)
        return min(self.max_tokens, natural)

    def token(self, index: int) -> tuple[int, str]:
        if self.script and index < len(self.script):
            return self.script[index]
        return textgen.output_token(self.tokens, index)


class EngineCore:
    def __init__(self, *, rank: int, tp: int, max_num_seqs: int, profile, metrics, labels: dict,
                 capacity_tokens: int, is_hung):
        self.rank = rank
        self.tp = tp
        self.max_num_seqs = max_num_seqs
        self.profile = profile
        self.m = metrics
        self.labels = labels
        self.capacity_tokens = capacity_tokens
        self.is_hung = is_hung
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.held_tokens = 0  # KV kept for remote decoders counts against the cache
        self.prefix = None  # LocalPrefixCache when prefix caching is on (set by the engine)
        self.busy_s = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        self.publish()
        self._wake.set()

    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    def publish(self) -> None:
        self.m.running.labels(**self.labels).set(len(self.running))
        self.m.waiting.labels(**self.labels).set(len(self.waiting))
        used = sum(len(r.tokens) + r.generated for r in self.running) + self.held_tokens
        self.m.kv_usage.labels(**self.labels).set(min(1.0, used / self.capacity_tokens))

    async def _loop(self) -> None:
        step_began = None  # when the previous step's tokens came out: the next step starts then, not after emitting
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                step_began = None
            while self.is_hung():
                await asyncio.sleep(0.05)
                step_began = None
            while self.waiting and len(self.running) < self.max_num_seqs:
                self.running.append(self.waiting.pop(0))
            self.publish()
            new = [r for r in self.running if r.generated == 0]
            if new:
                compute = sum(r.need_prefill_tokens for r in new)
                loaded = sum(r.load_tokens for r in new)
                duration = (profiles.prefill_seconds(self.profile, compute, self.tp) if compute else 0.0) \
                    + profiles.load_seconds(self.profile, loaded)
                batch = new
            else:
                duration = profiles.itl_seconds(self.profile, len(self.running), self.tp)
                batch = list(self.running)
            began = step_began if step_began is not None else time.monotonic()
            await asyncio.sleep(max(0.0, began + duration - time.monotonic()))
            self.busy_s += duration
            now = step_began = time.monotonic()
            for req in batch:
                self._emit(req, now)
            self.running = [r for r in self.running if r.finish_reason is None]
            self.publish()

    def _emit(self, req: Request, now: float) -> None:
        if req.generated == 0:
            # vLLM counts the whole prompt, then splits it by where each token's KV came from.
            n, compute, external = len(req.tokens), req.need_prefill_tokens, req.external_tokens
            self.m.prompt_tokens.labels(**self.labels).inc(n)
            by_source = self.m.prompt_tokens_by_source
            by_source.labels(**self.labels, source="local_compute").inc(compute)
            by_source.labels(**self.labels, source="external_kv_transfer").inc(external)
            by_source.labels(**self.labels, source="local_cache_hit").inc(max(0, n - compute - external))
            req.first_token_at = now
            self.m.ttft.labels(**self.labels).observe(now - req.arrival)
            for callback in req.on_prefilled:
                callback()
        else:
            self.m.itl.labels(**self.labels).observe(now - req.last_token_at)
        token_id, text = req.token(req.generated)
        req.generated += 1
        req.last_token_at = now
        self.m.generation_tokens.labels(**self.labels).inc()
        if req.generated >= req.stop_at:
            req.finish_reason = "length" if req.generated >= req.max_tokens else "stop"
        req.out.put_nowait((token_id, text, req.finish_reason))
        if req.finish_reason:
            self.m.success.labels(**self.labels, finished_reason=req.finish_reason).inc()
            self.m.e2e.labels(**self.labels).observe(now - req.arrival)
            req.out.put_nowait(FINISHED)

    def abort(self, req: Request) -> None:
        """Client went away: drop the request wherever it is."""
        if req.finish_reason is not None:
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        req.finish_reason = "abort"
        self.m.success.labels(**self.labels, finished_reason="abort").inc()
        self.publish()
