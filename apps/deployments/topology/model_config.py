"""A model's ModelProfile read from its config.json (and model.safetensors.index.json): the KV-cache shape, and the
parameter counts docs/hbm-fit.md derives when config.json has the fields for them. Pure: callers pass the text.

    reading = model_config_read(config_text, index_text)   # ModelConfigError names the field (or JSON line:column)
    reading.profile                                         # a ModelProfile; params_b None when underivable
    reading.params_missing                                  # then the config.json field that was missing
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .model_params import MissingField, ModelConfigError, param_counts
from .spec import DTYPE_BYTES, ModelProfile

__all__ = ["ModelConfigError", "ModelConfigReading", "index_files", "model_config_read"]

_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")  # Qwen-MoE, DeepSeek, Mixtral
_QUANT_METHODS = {"fp8": "fp8"}  # quantization_config.quant_method -> WEIGHT_BYTES key
# msModelSlim weights carry `"quantize": "w8a8"` in config.json, the key MindIE reads.
_QUANTIZE = {"w8a8": "w8a8"}


@dataclass(frozen=True)
class ModelConfigReading:
    profile: ModelProfile
    model_type: str | None
    params_missing: str | None  # the config.json field that kept the parameter counts from being derived
    checkpoint_bytes: int | None  # the index's metadata.total_size: what the shards hold, scales included


def _json_object(text: str, what: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelConfigError(None, f"{what} is not valid JSON ({error.msg})", error.lineno, error.colno) from None
    if not isinstance(data, dict):
        raise ModelConfigError(None, f"{what} must be a JSON object, not {type(data).__name__}")
    return data


def _positive(config: Mapping, key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ModelConfigError(key, "missing from config.json")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelConfigError(key, f"expected a positive integer, got {value!r}")
    return value


def _dtype(config: Mapping) -> str:
    key = "torch_dtype" if "torch_dtype" in config else "dtype"  # newer transformers write `dtype`
    value = config.get(key)
    if value is None:
        raise ModelConfigError("torch_dtype", "missing from config.json")
    if value not in DTYPE_BYTES or value in ("fp8", "int8"):
        raise ModelConfigError(key, f"expected bfloat16, float16 or float32, got {value!r}")
    return value


def _weights(config: Mapping, dtype: str) -> str:
    if "quantize" in config:
        if config["quantize"] not in _QUANTIZE:
            raise ModelConfigError("quantize", f"expected one of {', '.join(_QUANTIZE)}, got {config['quantize']!r}")
        return _QUANTIZE[config["quantize"]]
    quant = config.get("quantization_config")
    if quant is None:
        return dtype
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if method not in _QUANT_METHODS:
        raise ModelConfigError("quantization_config.quant_method",
                               f"expected one of {', '.join(_QUANT_METHODS)} (the formats the HBM check can size), "
                               f"got {method!r}")
    return _QUANT_METHODS[method]


def _experts(config: Mapping) -> int | None:
    for key in _EXPERT_KEYS:
        if config.get(key):  # 0 and null both mean a dense model
            return _positive(config, key)
    return None


def model_config_read(config_text: str, index_text: str | None = None, *, name: str | None = None
                      ) -> ModelConfigReading:
    config = _json_object(config_text, "config.json")
    layers = _positive(config, "num_hidden_layers")
    hidden = _positive(config, "hidden_size")
    heads = _positive(config, "num_attention_heads")
    kv_heads = _positive(config, "num_key_value_heads", heads)  # absent: transformers' default, plain MHA
    mla = config.get("kv_lora_rank") is not None
    if mla:  # DeepSeek MLA caches one latent per layer: kv_lora_rank + qk_rope_head_dim, no separate K and V
        kv_heads, head_dim = 1, _positive(config, "kv_lora_rank") + _positive(config, "qk_rope_head_dim")
    elif config.get("head_dim") is not None:
        head_dim = _positive(config, "head_dim")
    elif hidden % heads:
        raise ModelConfigError("head_dim", f"missing, and hidden_size {hidden} is not a multiple of "
                                           f"num_attention_heads {heads}")
    else:
        head_dim = hidden // heads
    dtype = _dtype(config)
    weights = _weights(config, dtype)
    experts = _experts(config)
    max_position = config.get("max_position_embeddings")
    max_position = _positive(config, "max_position_embeddings") if max_position is not None else None
    try:
        counts, missing = param_counts(config, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                                       head_dim=head_dim, experts=experts, mla=mla, weights=weights), None
    except MissingField as gap:
        counts, missing = None, gap.field
    profile = ModelProfile(
        layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, attention_heads=heads,
        kv_layout="mla" if mla else "mha", name=name, weights=weights, experts=experts, hidden_size=hidden,
        max_position=max_position, params_b=counts.params_b if counts else None,
        expert_params_b=counts.expert_params_b if counts else 0.0,
        unquantized_params_b=counts.unquantized_params_b if counts else 0.0,
    )
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    total = _index(index_text)[1] if index_text is not None else None
    return ModelConfigReading(profile=profile, model_type=model_type, params_missing=missing, checkpoint_bytes=total)


def _index(index_text: str) -> tuple[frozenset[str], int | None]:
    index = _json_object(index_text, "model.safetensors.index.json")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelConfigError("weight_map", "expected a non-empty object of tensor name -> shard file")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or "/" in shard:
            raise ModelConfigError(f"weight_map.{tensor}", f"expected a shard file name, got {shard!r}")
    total = index.get("metadata", {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise ModelConfigError("metadata.total_size", f"expected a byte count, got {total!r}")
    return frozenset(weight_map.values()), total


def index_files(index_text: str) -> frozenset[str]:
    """The shard file names model.safetensors.index.json's weight_map names."""
    return _index(index_text)[0]
