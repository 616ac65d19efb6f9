"""Parameter counts from a model's config.json, as docs/hbm-fit.md derives them: routed experts, shared experts,
dense MLP layers, attention (GQA or MLA), router gates, embeddings and lm_head. Norms and biases are left out
(well under 0.1%)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BILLION = 1e9


@dataclass(frozen=True)
class ParamCounts:
    params_b: float
    expert_params_b: float
    unquantized_params_b: float  # embeddings, lm_head, router gates (+ MLA's kv_b_proj in W8A8): stay BF16


class ModelConfigError(ValueError):
    """A config.json (or safetensors index) we cannot read: `field` names the field, `line`/`column` place bad JSON."""

    def __init__(self, field: str | None, message: str, line: int | None = None, column: int | None = None):
        self.field, self.line, self.column = field, line, column
        where = f"line {line} column {column}: " if line is not None else ""
        super().__init__(f"{where}{field}: {message}" if field else f"{where}{message}")


class MissingField(Exception):
    """config.json lacks a field the counts need (the shape does not): `field` names it."""

    def __init__(self, field: str):
        self.field = field
        super().__init__(field)


def _get(config: Mapping, key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise MissingField(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ModelConfigError(key, f"expected a non-negative integer, got {value!r}")
    return value


def moe_layer_count(config: Mapping, layers: int) -> int:
    """Layers with routed experts. DeepSeek: from first_k_dense_replace on, every moe_layer_freq-th; Qwen-MoE:
    every decoder_sparse_step-th except mlp_only_layers (each model sets only its own keys; defaults: all)."""
    first_dense = _get(config, "first_k_dense_replace", 0)
    freq = _get(config, "moe_layer_freq", 1) or 1
    step = _get(config, "decoder_sparse_step", 1) or 1
    mlp_only = config.get("mlp_only_layers") or []
    return sum(1 for i in range(layers)
               if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only)


def _attention(config: Mapping, hidden: int, heads: int, kv_heads: int, head_dim: int, mla: bool) -> tuple[int, int]:
    """(attention parameters per layer, of which MLA's kv_b_proj)."""
    if not mla:
        return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2, 0  # q, o + k, v
    kv_lora, rope = _get(config, "kv_lora_rank"), _get(config, "qk_rope_head_dim")
    nope, v_dim = _get(config, "qk_nope_head_dim"), _get(config, "v_head_dim")
    q_lora = config.get("q_lora_rank")
    q = hidden * heads * (nope + rope) if q_lora is None else \
        hidden * _get(config, "q_lora_rank") + _get(config, "q_lora_rank") * heads * (nope + rope)
    kv_b = kv_lora * heads * (nope + v_dim)
    return q + hidden * (kv_lora + rope) + kv_b + heads * v_dim * hidden, kv_b


def param_counts(config: Mapping, *, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 experts: int | None, mla: bool, weights: str) -> ParamCounts:
    """Raises MissingField naming the first field the derivation needs and config.json lacks."""
    vocab = _get(config, "vocab_size")
    moe_layers = moe_layer_count(config, layers) if experts else 0
    dense_layers = layers - moe_layers
    expert_params = shared = gates = 0
    if experts:
        moe_inter = _get(config, "moe_intermediate_size")
        expert_params = moe_layers * experts * 3 * hidden * moe_inter
        shared = moe_layers * 3 * hidden * (_get(config, "n_shared_experts", 0) * moe_inter
                                            + _get(config, "shared_expert_intermediate_size", 0))
        gates = moe_layers * hidden * experts
    dense = dense_layers * 3 * hidden * _get(config, "intermediate_size") if dense_layers else 0
    attention, kv_b = _attention(config, hidden, heads, kv_heads, head_dim, mla)
    # transformers' PretrainedConfig ties input and output embeddings unless the config says otherwise
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    total = expert_params + shared + dense + attention * layers + gates + embeddings
    unquantized = embeddings + gates + (kv_b * layers if weights == "w8a8" else 0)
    return ParamCounts(params_b=round(total / BILLION, 2), expert_params_b=round(expert_params / BILLION, 2),
                       unquantized_params_b=round(unquantized / BILLION, 2))
