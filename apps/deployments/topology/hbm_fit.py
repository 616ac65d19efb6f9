"""Does each instance fit in its dies' HBM? Per die: weights, a runtime reserve, the KV cache left in vLLM's budget
(--gpu-memory-utilization x die HBM) and the full-length sequences it holds. How and why: docs/hbm-fit.md.

Pure functions of the spec and NodeFacts. GB here is 2^30 bytes, as npu-smi's MB are 2^20 (a 65536 MB die = 64 GB).
"""

from __future__ import annotations

from dataclasses import dataclass

from .node_facts import NodeFacts
from .spec import WEIGHT_BYTES, InstanceSpec, ModelProfile, TopologySpec

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default
DEFAULT_BATCHED_TOKENS = 8192  # vLLM V1's --max-num-batched-tokens default for an API server
IDLE_USED_MB = 3400  # HBM an idle A2/A3 die already shows used (3.2-3.4 GB, docs/ascend-pd-launch-facts.md §6)
RUNTIME_FIXED_MB = 2048  # HCCL buffers (HCCL_BUFFSIZE per comm group), ATB/ACL workspace, graph capture
ACTIVATION_FACTOR = 20  # peak activations ~ batched tokens x hidden x 2 bytes x this (MoE dispatch, MLP, logits)
HEADROOM_MARGIN_MB = 1024  # less than this outside vLLM's budget on a die is tight
TP_CHOICES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class DieFit:
    """One instance's figures for one of its dies (every die of an instance holds the same share)."""

    instance: str
    tp: int
    dp: int
    die_mb: int
    utilization: float
    weights: float  # bytes
    reserve: float
    kv: float  # what the budget leaves for the KV cache (negative: the weights do not fit)
    kv_token_bytes: int  # KV bytes per token on one die
    kv_tokens: int  # tokens the KV cache of one DP rank holds
    max_model_len: int | None
    max_num_seqs: int | None
    idle_mb: int = IDLE_USED_MB

    @property
    def budget(self) -> float:
        return self.utilization * self.die_mb * MiB

    @property
    def headroom(self) -> float:
        """The die's HBM outside vLLM's budget and the idle baseline."""
        return (self.die_mb - self.idle_mb) * MiB - self.budget

    @property
    def starts(self) -> bool:
        """vLLM refuses to start when the die's free HBM is below utilization x total."""
        return self.headroom >= 0

    @property
    def loads(self) -> bool:
        return self.kv > 0

    @property
    def full_sequences(self) -> int | None:
        return self.kv_tokens // self.max_model_len if self.max_model_len else None

    @property
    def status(self) -> str:
        if not self.starts:
            return "cannot start"
        if not self.loads:
            return "cannot load"
        if self.full_sequences is not None and self.full_sequences < 1:
            return "no room for one sequence"
        if self.full_sequences is not None and self.max_num_seqs and self.full_sequences < self.max_num_seqs:
            return "tight"
        if self.headroom < HEADROOM_MARGIN_MB * MiB:
            return "tight"
        return "fits"

    def as_dict(self) -> dict:
        return {"instance": self.instance, "die_gb": round(self.die_mb / 1024, 1),
                "utilization": self.utilization, "budget_gb": gb(self.budget), "weights_gb": gb(self.weights),
                "reserve_gb": gb(self.reserve), "kv_gb": gb(self.kv), "headroom_gb": gb(self.headroom),
                "kv_tokens": self.kv_tokens, "max_model_len": self.max_model_len,
                "max_num_seqs": self.max_num_seqs, "full_sequences": self.full_sequences, "status": self.status,
                "text": fit_text(self)}


def gb(value: float) -> float:
    return round(value / GiB, 1)


# --- the figures -------------------------------------------------------------------------------------------------

def weight_bytes(profile: ModelProfile, weights: str | None = None) -> float:
    """All the weights loaded for serving, in bytes: quantized parts at the format's bytes, the rest at BF16."""
    fmt = weights or profile.weights
    total = (profile.params_b or 0.0) * 1e9
    keep = profile.unquantized_params_b * 1e9 if WEIGHT_BYTES[fmt] < 2 else 0.0
    return (total - keep) * WEIGHT_BYTES[fmt] + keep * 2


def die_weight_bytes(profile: ModelProfile, tp: int, dp: int, weights: str | None = None) -> float:
    """One die's share: routed experts over TP x DP (vLLM flattens TP across DP for MoE layers, with or without
    expert parallelism), everything else (attention, embeddings, lm_head, shared experts) over TP."""
    total = weight_bytes(profile, weights)
    per_param = WEIGHT_BYTES[weights or profile.weights]
    experts = profile.expert_params_b * 1e9 * per_param
    return (total - experts) / tp + experts / (tp * dp)


def die_kv_token_bytes(profile: ModelProfile, tp: int) -> int:
    """KV bytes per token on one die. MHA/GQA: the KV heads split over TP (a rank keeps one when TP > heads); MLA: the
    latent is not split, every TP rank holds all of it."""
    if profile.kv_layout == "mla":
        return profile.kv_bytes_per_token
    heads = max(1, profile.kv_heads // tp)
    return 2 * profile.layers * heads * profile.head_dim * profile.dtype_bytes


def engine_arg(inst: InstanceSpec, flag: str) -> tuple[int, str] | None:
    """(index, value) of `flag value` in the instance's extra_args."""
    args = inst.extra_args
    for k, token in enumerate(args[:-1]):
        if token == flag:
            return k + 1, args[k + 1]
    return None


def utilization(inst: InstanceSpec) -> float:
    found = engine_arg(inst, "--gpu-memory-utilization")
    try:
        value = float(found[1]) if found else DEFAULT_UTILIZATION
    except ValueError:
        return DEFAULT_UTILIZATION
    return value if 0 < value <= 1 else DEFAULT_UTILIZATION


def batched_tokens(inst: InstanceSpec) -> int:
    found = engine_arg(inst, "--max-num-batched-tokens")
    return int(found[1]) if found and found[1].isdecimal() and int(found[1]) > 0 else DEFAULT_BATCHED_TOKENS


def reserve_bytes(profile: ModelProfile, inst: InstanceSpec) -> float:
    hidden = profile.hidden_size or profile.attention_heads * profile.head_dim
    return RUNTIME_FIXED_MB * MiB + batched_tokens(inst) * hidden * 2 * ACTIVATION_FACTOR


def instance_fit(profile: ModelProfile, inst: InstanceSpec, die_mb: int, *, tp: int | None = None,
                 dp: int | None = None, util: float | None = None, weights: str | None = None) -> DieFit:
    """The figures for `inst` on dies of `die_mb`; tp, dp, util and weights override the instance's for a fix."""
    tp, dp = tp or inst.tp, dp or inst.dp
    util = util or utilization(inst)
    weight = die_weight_bytes(profile, tp, dp, weights)
    reserve = reserve_bytes(profile, inst)
    kv = util * die_mb * MiB - weight - reserve
    token = die_kv_token_bytes(profile, tp)
    return DieFit(instance=inst.name, tp=tp, dp=dp, die_mb=die_mb, utilization=util, weights=weight,
                  reserve=reserve, kv=kv, kv_token_bytes=token, kv_tokens=max(0, int(kv // token)),
                  max_model_len=inst.max_model_len or profile.max_position, max_num_seqs=inst.max_num_seqs)


def instance_die_mb(inst: InstanceSpec, nodes: dict[str, NodeFacts]) -> int | None:
    """The smallest die HBM over the nodes the instance spans; None if any of them is unknown."""
    sizes = [nodes[n].die_hbm_mb if n in nodes else None for n in inst.span]
    return None if not sizes or None in sizes else min(sizes)


def fit_estimates(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> tuple[DieFit, ...]:
    """Every instance whose profile has sizes and whose dies' HBM is known."""
    profile = spec.model.profile
    if not profile.has_sizes:
        return ()
    out = []
    for inst in spec.instances:
        die_mb = instance_die_mb(inst, nodes)
        if die_mb:
            out.append(instance_fit(profile, inst, die_mb))
    return tuple(out)


def fit_text(fit: DieFit) -> str:
    seqs = ""
    if fit.full_sequences is not None:
        seqs = f", {fit.full_sequences} full-length ({fit.max_model_len}-token) sequences"
        if fit.max_num_seqs:
            seqs += f" for max_num_seqs {fit.max_num_seqs}"
    return (f"{fit.instance} (TP{fit.tp} x DP{fit.dp}) per die of {fit.die_mb // 1024} GB: weights "
            f"{gb(fit.weights)} GB + reserve {gb(fit.reserve)} GB + KV {gb(max(fit.kv, 0))} GB = budget "
            f"{gb(fit.budget)} GB (utilization {fit.utilization:g}); KV holds {fit.kv_tokens:,} tokens per DP rank"
            f"{seqs}; headroom {gb(fit.headroom)} GB; {fit.status}")
