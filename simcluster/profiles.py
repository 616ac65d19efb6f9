"""Model profiles and the engine cost model: how long prefill/decode take, how many KV bytes exist.

Cost model (documented in simcluster/README.md):
  prefill_s(tokens, tp)  = time_scale * (prefill_fixed_s + tokens * prefill_s_per_token_tp1 / tp**0.85)
  load_s(tokens)         = time_scale * tokens * load_s_per_token      (prefix found in a KV store)
  itl_s(batch, tp)       = time_scale * itl_base_s_tp1 / tp**0.5 * (1 + 0.015 * (batch - 1))
  kv bytes really held   = tokens * kv_bytes_per_token // kv_scale    (kv_scale default 1024)
tp**0.85 / tp**0.5: prefill is compute bound and scales well with TP, decode is memory bound and
scales less. kv_scale keeps a 4-node demo within a few MB of RAM while metrics still report the
bytes the real model would move (`*_model_bytes_total`).
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


PROFILES = {
    # MLA: (kv_lora_rank 512 + rope 64) * 61 layers * 2 bytes (bf16)
    "deepseek-r1": ModelProfile("deepseek-r1", 576 * 61 * 2, 0.010, 0.0016, 0.090, 0.00001),
    # GQA: 2 (K,V) * 94 layers * 4 kv heads * 128 dims * 2 bytes
    "qwen3-235b": ModelProfile("qwen3-235b", 2 * 94 * 4 * 128 * 2, 0.008, 0.0012, 0.070, 0.00001),
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


def prefill_seconds(p: ModelProfile, tokens: int, tp: int) -> float:
    return time_scale() * (p.prefill_fixed_s + tokens * p.prefill_s_per_token_tp1 / max(tp, 1) ** 0.85)


def load_seconds(p: ModelProfile, tokens: int) -> float:
    return time_scale() * tokens * p.load_s_per_token


def itl_seconds(p: ModelProfile, batch: int, tp: int) -> float:
    return time_scale() * p.itl_base_s_tp1 / max(tp, 1) ** 0.5 * (1 + 0.015 * max(batch - 1, 0))


def held_bytes(p: ModelProfile, tokens: int) -> int:
    return max(1, tokens * p.kv_bytes_per_token // kv_scale())
