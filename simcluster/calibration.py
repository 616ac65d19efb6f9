"""Published Ascend serving figures the cost model (simcluster/profiles.py) is fitted to, and what the model
predicts for each on the same layout.

`CASES` are benchmark runs someone published (model, hardware, layout, workload, figures, exact source);
`predict(case)` replays the run in virtual time with the engine's own scheduling (simcluster/engine/core.py:
each DP rank admits up to --max-num-seqs, prefills all newly admitted requests in one step, else decodes one
token for every running request; routing to the least-loaded rank) and the profile's cost functions, so it
takes milliseconds. bench/simulator_calibration.py measures the same figures on real simulated engines;
tests/simcluster/test_cost_model_calibration.py asserts `predict` stays within `RATIO_LIMIT` of every asserted
figure.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
from collections import deque
from dataclasses import dataclass, field

from simcluster import profiles

RATIO_LIMIT = 1.25  # simulator / published must lie within [1/RATIO_LIMIT, RATIO_LIMIT]

VA = "vllm-project/vllm-ascend@182b75ea84ff13ece27b57391331ef8935410aea"  # the snapshot read, 2026-08-22


@dataclass(frozen=True)
class Role:
    """One kind of engine instance: how many, and each one's DP x TP and --max-num-seqs per DP rank."""
    instances: int
    dp: int
    tp: int
    max_num_seqs: int

    @property
    def ranks(self) -> int:
        return self.instances * self.dp

    @property
    def dies(self) -> int:
        return self.ranks * self.tp


@dataclass(frozen=True)
class Case:
    key: str
    profile: str
    hardware: str
    input_tokens: int
    output_tokens: int
    concurrency: int
    request_rate: float  # requests/s the client sends at; 0: as fast as concurrency allows
    num_prompts: int
    figures: dict  # figure name -> published value (names in FIGURES)
    source: str
    mixed: Role | None = None
    prefill: Role | None = None
    decode: Role | None = None
    asserted: bool = True  # False: shown for reference, outside the fit (see note)
    note: str = ""
    unasserted: tuple = ()  # figures of an asserted case shown for reference only (see note)

    def asserts(self, figure: str) -> bool:
        return self.asserted and figure not in self.unasserted

    @property
    def dies(self) -> int:
        return sum(r.dies for r in (self.mixed, self.prefill, self.decode) if r)

    def layout(self) -> str:
        def one(label, r):
            head = f"{r.instances}x " if r.instances > 1 else ""
            return f"{label} {head}DP{r.dp}xTP{r.tp} (seqs {r.max_num_seqs})"
        if self.mixed:
            return one("mixed", self.mixed)
        return f"{one('P', self.prefill)} + {one('D', self.decode)}"


FIGURES = {
    "output_tps": "output token throughput, tok/s",
    "tpot_ms": "mean TPOT, ms",
    "ttft_median_ms": "median TTFT, ms",
    "total_tps_per_die": "total (input+output) tok/s per die",
    "pd_over_mixed": "PD / mixed output throughput, same 32 dies",
}

NIGHTLY = f"{VA}:tests/e2e/nightly"
CASES = [
    Case("ds-r1-tp16-mixed", "deepseek-r1", "A3 (TP16 in one server)", 4096, 1536, 24, 1.0, 200,
         {"ttft_median_ms": 713.87, "tpot_ms": 68.96, "output_tps": 320.47},
         "vllm-project/vllm-ascend commit 0fc9b56d400f6daede1044bb03187a3c106c4eb1 (PR #1353) message, "
         "'Before Improvement' vllm bench serve result",
         mixed=Role(1, 1, 16, 24), unasserted=("tpot_ms", "output_tps"),
         note="DeepSeek-R1-W8A8, torchair graph, without MTP while the profile decodes as deployed with MTP 1: "
              "TPOT and throughput shown, not asserted; median TTFT (the prefill) asserted"),
    Case("ds-r1-a3-dp2tp8-c16", "deepseek-r1", "A3, 1 node x 16 dies", 3500, 1500, 16, 0.0, 64,
         {"output_tps": 411.0},
         f"{NIGHTLY}/single_node/models/configs/Deepseek_R1_W8A8_A3.yaml (perf baseline, Output Token Throughput)",
         mixed=Role(1, 2, 8, 16), note="DeepSeek-R1-0528 w8a8 QuaRot, MTP 1; CI passes at >= 0.95 x baseline"),
    Case("ds-r1-a3-dp2tp8-c400", "deepseek-r1", "A3, 1 node x 16 dies", 3500, 1500, 1000, 0.0, 400,
         {"output_tps": 656.5666},
         f"{NIGHTLY}/single_node/models/configs/DeepSeek-R1-0528-W8A8.yaml (perf baseline, Output Token Throughput)",
         mixed=Role(1, 2, 8, 16), note="DeepSeek-R1-0528-W8A8, MTP 1; all 400 prompts sent at once"),
    Case("ds-v31-2p1d", "deepseek-r1", "A3, 4 nodes x 16 dies", 3500, 1500, 485, 0.0, 2000,
         {"tpot_ms": 48.82, "total_tps_per_die": 478.0, "ttft_median_ms": 6160.0},
         f"{VA}:docs/source/tutorials/models/DeepSeek-V3.1.md section 8 (Performance Evaluation)",
         prefill=Role(2, 2, 8, 8), decode=Role(1, 32, 1, 28), unasserted=("ttft_median_ms",),
         note="DeepSeek-V3.1-w8a8-mtp-QuaRot (R1's architecture), MTP 1. Concurrency and prompt count are not "
              "stated: 485 is Little's law on the stated figures (478 x 64 / 5000 req/s x (6.16 s + 1499 x "
              "48.82 ms)), reading '478 TPS per card' as input+output tokens per die. TTFT (a mean in the "
              "source) is queueing at that guessed concurrency: shown, not asserted"),
    Case("qwen3-235b-1p1d", "qwen3-235b", "A3, 2 nodes x 16 dies", 3500, 1500, 700, 11.2, 2800,
         {"output_tps": 2424.6267},
         f"{NIGHTLY}/multi_node/internal_dp/config/Qwen3-235B-disagg-pd.yaml (perf baseline)",
         prefill=Role(1, 2, 8, 32), decode=Role(1, 4, 4, 32), note="Qwen3-235B-A22B BF16, EP on"),
    Case("qwen3-235b-mixed-dp4tp8", "qwen3-235b", "A3, 2 nodes x 16 dies", 3500, 1500, 700, 11.2, 2800,
         {"output_tps": 2209.9211},
         f"{NIGHTLY}/multi_node/internal_dp/config/Qwen3-235B-A22B.yaml (perf baseline)",
         mixed=Role(1, 4, 8, 32), note="Qwen3-235B-A22B BF16, EP on, the same 32 dies as the 1P1D row"),
    Case("qwen3-235b-a2-mixed", "qwen3-235b", "A2, 2 nodes x 8 dies", 3500, 1500, 256, 4.8, 2800,
         {"output_tps": 1152.0278},
         f"{NIGHTLY}/multi_node/internal_dp/config/Qwen3-235B-A22B-A2.yaml (perf baseline)",
         mixed=Role(1, 2, 8, 128), asserted=False,
         note="A2 (EP across two servers over RoCE) at 128 sequences per rank: the profiles model A3, not fitted"),
]
PD_OVER_MIXED = ("qwen3-235b-1p1d", "qwen3-235b-mixed-dp4tp8")  # same model, workload and die count


def published_pd_over_mixed() -> float:
    pd, mixed = (case_named(k).figures["output_tps"] for k in PD_OVER_MIXED)
    return pd / mixed


def case_named(key: str) -> Case:
    for case in CASES:
        if case.key == key:
            return case
    raise KeyError(f"no calibration case named {key!r}")


@dataclass(eq=False)
class _Req:
    index: int
    target: int  # tokens this leg emits (1 on a Prefill)
    tokens: int  # prompt tokens to compute (0 on a Decode: the KV arrived)
    sent: float = 0.0
    generated: int = 0
    first: float | None = None
    done: float | None = None


@dataclass(eq=False)
class _Rank:
    profile: profiles.ModelProfile
    tp: int
    max_num_seqs: int
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    step: tuple | None = None  # (start, end, kind "new"|"decode", batch, step seconds, steps)
    version: int = 0
    kicked: bool = False  # idle, a step starts once every arrival of this instant is in

    def load(self) -> int:
        return len(self.waiting) + len(self.running)


class _Replay:
    """Virtual-time replay of a benchmark client against the engine cores of one case."""

    def __init__(self, case: Case, profile: profiles.ModelProfile):
        self.case, self.profile = case, profile
        front = case.mixed or case.prefill
        self.front = [_Rank(profile, front.tp, front.max_num_seqs) for _ in range(front.ranks)]
        self.back = [_Rank(profile, case.decode.tp, case.decode.max_num_seqs)
                     for _ in range(case.decode.ranks)] if case.decode else []
        self.events: list = []
        self.seq = itertools.count()
        self.rr = itertools.count()
        self.done: list[_Req] = []
        self.next_prompt = 0
        self.client_free = case.concurrency

    def push(self, t: float, kind: str, payload) -> None:
        heapq.heappush(self.events, (t, next(self.seq), kind, payload))

    def run(self) -> list[_Req]:
        for _ in range(min(self.case.concurrency, self.case.num_prompts)):
            self._send_next(0.0)
        while self.events:
            t, _, kind, payload = heapq.heappop(self.events)
            if kind == "send":
                self._route(payload, self.front, t)
            elif kind == "to_decode":
                self._route(payload, self.back, t)
            elif kind == "kick":
                payload.kicked = False
                if payload.step is None:
                    self._start_step(payload, t)
            elif kind == "step_end":
                rank, version = payload
                if version == rank.version:
                    self._finish_step(rank, t)
        return self.done

    def _send_next(self, now: float) -> None:
        if self.next_prompt >= self.case.num_prompts:
            return
        i = self.next_prompt
        self.next_prompt += 1
        rate = self.case.request_rate
        at = max(now, i / rate) if rate > 0 else now
        first_leg = 1 if self.case.decode else self.case.output_tokens
        self.push(at, "send", _Req(i, first_leg, self.case.input_tokens, sent=at))

    def _route(self, req: _Req, ranks: list[_Rank], t: float) -> None:
        turn = next(self.rr)
        _, rank = min(enumerate(ranks), key=lambda ir: (ir[1].load(), (ir[0] - turn) % len(ranks)))
        rank.waiting.append(req)
        if rank.step is None:
            if not rank.kicked:
                rank.kicked = True
                self.push(t, "kick", rank)
        elif rank.step[2] == "decode":
            start, end, _, batch, dt, steps = rank.step
            cut = max(1, -int(-(t - start) // dt))  # the step in progress ends, then the engine admits
            if cut < steps:
                self._schedule(rank, (start, start + cut * dt, "decode", batch, dt, cut))

    def _schedule(self, rank: _Rank, step: tuple) -> None:
        rank.version += 1
        rank.step = step
        self.push(step[1], "step_end", (rank, rank.version))

    def _start_step(self, rank: _Rank, t: float) -> None:
        while rank.waiting and len(rank.running) < rank.max_num_seqs:
            rank.running.append(rank.waiting.popleft())
        if not rank.running:
            rank.step = None
            return
        new = [r for r in rank.running if r.generated == 0]
        if new:
            compute = sum(r.tokens for r in new)
            dt = profiles.prefill_seconds(self.profile, compute, rank.tp, scale=1.0) if compute else 0.0
            self._schedule(rank, (t, t + dt, "new", new, dt, 1))
            return
        dt = profiles.itl_seconds(self.profile, len(rank.running), rank.tp, scale=1.0)
        steps = min(r.target - r.generated for r in rank.running)
        self._schedule(rank, (t, t + steps * dt, "decode", list(rank.running), dt, steps))

    def _finish_step(self, rank: _Rank, t: float) -> None:
        _, _, kind, batch, _, steps = rank.step
        for req in batch:
            if req.first is None:
                req.first = t
            req.generated += steps
            if req.generated >= req.target:
                self._leg_done(req, rank, t)
        rank.running = [r for r in rank.running if r.generated < r.target]
        self._start_step(rank, t)

    def _leg_done(self, req: _Req, rank: _Rank, t: float) -> None:
        if self.case.decode and any(rank is r for r in self.front):
            leg = _Req(req.index, self.case.output_tokens, 0, sent=req.sent)
            self.push(t, "to_decode", leg)
            return
        req.done = t
        self.done.append(req)
        self._send_next(t)


def replay(case: Case, profile: profiles.ModelProfile | None = None) -> dict:
    """The case's figures as the cost model (time scale 1) produces them on the case's layout."""
    profile = profile or profiles.PROFILES[case.profile]
    done = _Replay(case, profile).run()
    if len(done) != case.num_prompts:
        raise RuntimeError(f"{case.key}: replay finished {len(done)} of {case.num_prompts} requests")
    span = max(r.done for r in done) - min(r.sent for r in done)
    out = case.output_tokens
    return {
        "output_tps": len(done) * out / span,
        "tpot_ms": 1000 * statistics.fmean((r.done - r.first) / (out - 1) for r in done),
        "ttft_median_ms": 1000 * statistics.median(r.first - r.sent for r in done),
        "total_tps_per_die": len(done) * (case.input_tokens + out) / span / case.dies,
    }


def predict(case: Case, profile: profiles.ModelProfile | None = None) -> dict:
    """replay() with the figures this case publishes only."""
    figures = replay(case, profile)
    return {name: figures[name] for name in case.figures}


def rows(profile_overrides: dict | None = None) -> list[dict]:
    """One row per published figure: case, figure, published, model, ratio (model / published)."""
    overrides = profile_overrides or {}
    table, by_key = [], {}
    for case in CASES:
        model = predict(case, overrides.get(case.profile))
        by_key[case.key] = model
        for name, published in case.figures.items():
            table.append({"case": case, "figure": name, "published": published, "model": model[name],
                          "ratio": model[name] / published, "asserted": case.asserts(name)})
    pd_key, mixed_key = PD_OVER_MIXED
    model_ratio = by_key[pd_key]["output_tps"] / by_key[mixed_key]["output_tps"]
    table.append({"case": case_named(pd_key), "figure": "pd_over_mixed", "published": published_pd_over_mixed(),
                  "model": model_ratio, "ratio": model_ratio / published_pd_over_mixed(), "asserted": True})
    return table
