"""Model profiles and the engine cost model: how long prefill/decode take, how many KV bytes exist.

Cost model, per DP rank (one engine core; simcluster/engine/core.py runs one step at a time):
  prefill_s(tokens, tp) = time_scale * (prefill_fixed_s + tokens * prefill_s_per_token_tp1 / tp**prefill_tp_exponent)
  load_s(tokens)        = time_scale * tokens * load_s_per_token      (prefix found in a KV store)
  itl_s(batch, tp)      = time_scale * itl_base_s_tp1 / tp**itl_tp_exponent * (1 + itl_batch_slope * (batch - 1))
  kv bytes really held  = tokens * kv_bytes_per_token // kv_scale    (kv_scale default 1024)
A step prefills every newly admitted request together (the sum of their tokens), else decodes one token for
every running request; DP ranks are independent cores. So, in steady state, a rank decoding `b` requests of
`L` output tokens spends per token itl_s(b) + (b / L) * prefill_s(input) when it also prefills (PD-mixed), and
itl_s(b) on a Decode.

Calibration (simcluster/calibration.py holds the published rows, simcluster/README.md "Calibration" the table):
- deepseek-r1 and qwen3-235b are fitted to vllm-ascend's published A3 figures (nightly CI baselines, the
  DeepSeek-V3.1 tutorial, PR #1353's benchmark) for 3.5k-4k input / 1.5k output.
- MoE decode runs expert-parallel over the whole instance, so a rank's step barely depends on its TP: the two
  MoE profiles have itl_tp_exponent 0 (DP32xTP1 and TP16 decode steps of DeepSeek fit the same base).
  itl_batch_slope is the cost of one more running sequence relative to a batch of one.
- deepseek-r1's decode is "as deployed" with MTP (1 speculative token), as in the rows it is fitted to;
  the simulator accepts --speculative-config and ignores it.
- generic-8b (a dense 7-8B model on one die) keeps its first-principles guesses: prefill ~0.12 ms/token
  (16 GFLOP/token at ~130 TFLOPS), decode 12 ms (16 GB of weights over ~1.6 TB/s), TP exponents 0.85/0.5.
kv_scale keeps a 4-node demo within a few MB of RAM while metrics still report the bytes the real model would
move (`*_model_bytes_total`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

BLOCK_SIZE = 128  # vllm-ascend's KV block size in tokens


@dataclass(frozen=True)
class ModelProfile:
    name: str
    kv_bytes_per_token: int  # what one token's KV costs on the real model (all layers)
    prefill_fixed_s: float
    prefill_s_per_token_tp1: float
    itl_base_s_tp1: float
    load_s_per_token: float
    itl_batch_slope: float = 0.015
    itl_tp_exponent: float = 0.5
    prefill_tp_exponent: float = 0.85


PROFILES = {
    # MLA: (kv_lora_rank 512 + rope 64) * 61 layers * 2 bytes (bf16)
    "deepseek-r1": ModelProfile("deepseek-r1", 576 * 61 * 2, prefill_fixed_s=0.20,
                                prefill_s_per_token_tp1=0.0009, itl_base_s_tp1=0.034,
                                load_s_per_token=0.00001, itl_batch_slope=0.022, itl_tp_exponent=0.0),
    # GQA: 2 (K,V) * 94 layers * 4 kv heads * 128 dims * 2 bytes
    "qwen3-235b": ModelProfile("qwen3-235b", 2 * 94 * 4 * 128 * 2, prefill_fixed_s=0.10,
                               prefill_s_per_token_tp1=0.00040, itl_base_s_tp1=0.0313,
                               load_s_per_token=0.00001, itl_batch_slope=0.022, itl_tp_exponent=0.0),
    # A 7-8B dense model: 2 * 32 layers * 8 kv heads * 128 dims * 2 bytes
    "generic-8b": ModelProfile("generic-8b", 2 * 32 * 8 * 128 * 2, 0.004, 0.00012, 0.012, 0.000005),
}


def profile_for(model: str) -> ModelProfile:
    """Pick a profile from the model name (`SIMCLUSTER_MODEL_PROFILE` overrides)."""
    forced = os.environ.get("SIMCLUSTER_MODEL_PROFILE")
    if forced:
        return PROFILES[forced]
    low = model.lower()
    if "deepseek" in low or "ds_r1" in low or "ds-r1" in low:
        return PROFILES["deepseek-r1"]
    if "qwen3-235" in low or "qwen3_235" in low:
        return PROFILES["qwen3-235b"]
    return PROFILES["generic-8b"]


def time_scale() -> float:
    """Multiplies every modelled latency; tests and benches set it below 1."""
    return float(os.environ.get("SIMCLUSTER_TIME_SCALE", "1.0"))


def kv_scale() -> int:
    return max(1, int(os.environ.get("SIMCLUSTER_KV_SCALE", "1024")))


def prefill_seconds(p: ModelProfile, tokens: int, tp: int, scale: float | None = None) -> float:
    """`scale`: the time scale to use instead of SIMCLUSTER_TIME_SCALE's (the same for itl_seconds)."""
    per_token = p.prefill_s_per_token_tp1 / max(tp, 1) ** p.prefill_tp_exponent
    return (time_scale() if scale is None else scale) * (p.prefill_fixed_s + tokens * per_token)


def load_seconds(p: ModelProfile, tokens: int) -> float:
    return time_scale() * tokens * p.load_s_per_token


def itl_seconds(p: ModelProfile, batch: int, tp: int, scale: float | None = None) -> float:
    base = p.itl_base_s_tp1 / max(tp, 1) ** p.itl_tp_exponent
    return (time_scale() if scale is None else scale) * base * (1 + p.itl_batch_slope * max(batch - 1, 0))


def held_bytes(p: ModelProfile, tokens: int) -> int:
    return max(1, tokens * p.kv_bytes_per_token // kv_scale())
