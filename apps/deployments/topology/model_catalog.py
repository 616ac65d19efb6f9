"""Model profiles by name (`model.profile: qwen3-235b-a22b`): the shape that sizes the KV cache and the sizes that
size the weights, each number from the model's config.json / model card (the sources and the arithmetic are in
docs/hbm-fit.md). A spec may still spell a profile out as a mapping with the same keys."""

from __future__ import annotations

from types import MappingProxyType

# Parameter counts in billions, derived from config.json as docs/hbm-fit.md shows:
# routed experts = MoE layers x experts x 3 x hidden x moe_intermediate; the rest is attention, shared experts,
# dense MLP layers, router gates, norms, embeddings and lm_head (split by TP, never by EP).
CATALOG = MappingProxyType({
    # Qwen/Qwen3-235B-A22B config.json: 94 layers (all MoE), 64 query / 4 KV heads of 128, hidden 4096, 128 experts
    # of moe_intermediate 1536 (8 active), vocab 151936, untied embeddings, bfloat16, max_position_embeddings 40960.
    "qwen3-235b-a22b": MappingProxyType({
        "layers": 94, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16", "attention_heads": 64,
        "kv_layout": "mha", "weights": "bfloat16", "params_b": 235.09, "expert_params_b": 227.09, "experts": 128,
        "unquantized_params_b": 1.3, "hidden_size": 4096, "max_position": 40960}),
    # deepseek-ai/DeepSeek-R1 config.json: 61 layers (first 3 dense, 58 MoE), 128 heads, MLA with kv_lora_rank 512 +
    # qk_rope_head_dim 64 cached per token and layer, hidden 7168, 256 routed experts of moe_intermediate 2048 (+1
    # shared), vocab 129280, max_position_embeddings 163840. 671B main-model parameters (the 14B MTP layer loads only
    # with speculative decoding). The published checkpoint is FP8 (e4m3, 128x128 block scales); vllm-ascend runs it as
    # BF16 weights (no FP8 matmul on Atlas A2/A3), which is what this entry loads.
    "deepseek-r1": MappingProxyType({
        "layers": 61, "kv_heads": 1, "head_dim": 576, "dtype": "bfloat16", "attention_heads": 128,
        "kv_layout": "mla", "weights": "bfloat16", "params_b": 671.0, "expert_params_b": 653.9, "experts": 256,
        "unquantized_params_b": 2.0, "hidden_size": 7168, "max_position": 163840}),
    # vllm-ascend/DeepSeek-R1-W8A8 (msModelSlim W8A8: int8 weights of the attention and MLP/expert linears, per-channel
    # scales); embeddings, lm_head, router gates, norms and kv_b_proj stay BF16. The KV cache stays BF16.
    "deepseek-r1-w8a8": MappingProxyType({
        "layers": 61, "kv_heads": 1, "head_dim": 576, "dtype": "bfloat16", "attention_heads": 128,
        "kv_layout": "mla", "weights": "w8a8", "params_b": 671.0, "expert_params_b": 653.9, "experts": 256,
        "unquantized_params_b": 3.0, "hidden_size": 7168, "max_position": 163840}),
})

# The same model with lighter weights: what a fix may name when the weights do not fit.
QUANTIZED = MappingProxyType({"deepseek-r1": "deepseek-r1-w8a8"})


def catalog_names() -> tuple[str, ...]:
    return tuple(CATALOG)
