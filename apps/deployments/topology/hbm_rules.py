"""The HBM fit check's verdicts (docs/hbm-fit.md): an instance that cannot start, cannot load its weights or cannot
hold one max_model_len sequence is a Problem with a fix computed from the figures; a tight one is a plan warning."""

from __future__ import annotations

import math

from .hbm_fit import (
    HEADROOM_MARGIN_MB,
    IDLE_USED_MB,
    TP_CHOICES,
    DieFit,
    MiB,
    engine_arg,
    fit_estimates,
    gb,
    instance_die_mb,
    instance_fit,
)
from .model_catalog import CATALOG, QUANTIZED, catalog_names
from .node_facts import NodeFacts
from .problem import Problem, instance_path
from .spec import WEIGHT_BYTES, InstanceSpec, ModelProfile, TopologySpec

SIZE_KEYS = "params_b, expert_params_b, experts, weights, unquantized_params_b, hidden_size"


def fit_problems(spec: TopologySpec, nodes: dict[str, NodeFacts], out: list[Problem]) -> None:
    profile = spec.model.profile
    for fit in fit_estimates(spec, nodes):
        inst = spec.instance(fit.instance)
        if not fit.starts:
            out.append(_cannot_start(spec, inst, fit))
        elif not fit.loads:
            out.append(Problem(instance_path(spec, inst, "tp"), f"{inst.name} cannot load its weights: per die "
                               f"{gb(fit.weights)} GB of weights + {gb(fit.reserve)} GB runtime reserve exceed the "
                               f"budget of {gb(fit.budget)} GB ({fit.utilization:g} x {gb(fit.die_mb * MiB)} GB)",
                               _more_room(profile, inst, fit, nodes)))
        elif fit.full_sequences is not None and fit.full_sequences < 1:
            out.append(Problem(instance_path(spec, inst, "max_model_len"), f"{inst.name}: the KV cache left per die "
                               f"({gb(fit.kv)} GB of a {gb(fit.budget)} GB budget after {gb(fit.weights)} GB weights) "
                               f"holds {fit.kv_tokens:,} tokens, less than one max_model_len {fit.max_model_len} "
                               f"sequence: vLLM refuses to start", _fewer_tokens(profile, inst, fit, nodes)))


def fit_warnings(spec: TopologySpec, nodes: dict[str, NodeFacts]) -> list[Problem]:
    profile = spec.model.profile
    if not profile.has_sizes:
        return [Problem("model.profile", "the model profile has no sizes, so the HBM fit check cannot run",
                        f"name a catalog profile (profile: {' | '.join(catalog_names())}) or add {SIZE_KEYS} "
                        "(docs/hbm-fit.md)")]
    out = []
    unknown = [i.name for i in spec.instances if instance_die_mb(i, nodes) is None]
    if unknown:
        out.append(Problem("instances", f"the HBM of the dies of {', '.join(unknown)} is unknown (no discovered NPUs, "
                           "no known hardware model), so their HBM fit is not checked",
                           "discover the nodes' NPUs, or set their hardware model (A3, A2)"))
    for fit in fit_estimates(spec, nodes):
        if not (fit.starts and fit.loads) or (fit.full_sequences is not None and fit.full_sequences < 1):
            continue  # a validation problem
        inst = spec.instance(fit.instance)
        held = fit.full_sequences
        if held is not None and inst.max_num_seqs and held < inst.max_num_seqs:
            out.append(Problem(instance_path(spec, inst, "max_num_seqs"), f"{inst.name}: the KV cache of a DP rank "
                               f"holds {fit.kv_tokens:,} tokens, {held} full-length ({fit.max_model_len}-token) "
                               f"sequences for max_num_seqs {inst.max_num_seqs}; when long requests fill it, vLLM "
                               "preempts and recomputes them",
                               f"lower max_num_seqs to {held}, or max_model_len to "
                               f"{_round_down(fit.kv_tokens // inst.max_num_seqs)}, if requests run that long"))
        if fit.headroom < HEADROOM_MARGIN_MB * MiB:
            out.append(Problem(_util_path(spec, inst), f"{inst.name}: --gpu-memory-utilization {fit.utilization:g} "
                               f"leaves {gb(fit.headroom)} GB of a die outside vLLM's budget beside the "
                               f"{IDLE_USED_MB} MB an idle die uses (under {HEADROOM_MARGIN_MB} MB): another "
                               "allocation on the die makes the start fail",
                               f"use --gpu-memory-utilization {_max_util(fit.die_mb, HEADROOM_MARGIN_MB)} or lower"))
    return out


# --- the fixes ---------------------------------------------------------------------------------------------------

def _util_path(spec: TopologySpec, inst: InstanceSpec) -> str:
    found = engine_arg(inst, "--gpu-memory-utilization")
    return instance_path(spec, inst, f"extra_args[{found[0]}]" if found else "extra_args")


def _max_util(die_mb: int, margin_mb: int = 0) -> float:
    return math.floor(100 * (die_mb - IDLE_USED_MB - margin_mb) / die_mb) / 100


def _cannot_start(spec: TopologySpec, inst: InstanceSpec, fit: DieFit) -> Problem:
    free = fit.die_mb - IDLE_USED_MB
    return Problem(_util_path(spec, inst), f"{inst.name}: --gpu-memory-utilization {fit.utilization:g} asks for "
                   f"{gb(fit.budget)} GB of a {gb(fit.die_mb * MiB)} GB die, but {gb(free * MiB)} GB are free "
                   f"beside the {IDLE_USED_MB} MB an idle die uses: vLLM refuses to start",
                   f"use --gpu-memory-utilization {_max_util(fit.die_mb)} or lower")


def _round_down(tokens: int) -> int:
    return tokens // 1024 * 1024 if tokens >= 1024 else tokens


def _layouts(profile: ModelProfile, inst: InstanceSpec, nodes: dict[str, NodeFacts]):
    """Other TP x DP for the instance, fewest dies first: TP a power of two dividing the attention heads and at most a
    node's dies, DP a multiple of the nodes it spans."""
    per_node = max((nodes[n].npu_count for n in inst.span if n in nodes), default=16) or 16
    span = len(inst.span)
    options = []
    for tp in TP_CHOICES:
        if tp > per_node or profile.attention_heads % tp:
            continue
        for dp in range(span, 65, span):
            if (tp, dp) != (inst.tp, inst.dp) and tp * dp >= inst.tp * inst.dp:
                options.append((tp * dp, tp != inst.tp, tp, dp))
    return [(tp, dp) for _, _, tp, dp in sorted(options)]


def _more_room(profile: ModelProfile, inst: InstanceSpec, fit: DieFit, nodes: dict[str, NodeFacts]) -> str:
    options = []
    for tp, dp in _layouts(profile, inst, nodes):
        other = instance_fit(profile, inst, fit.die_mb, tp=tp, dp=dp)
        if other.loads and (other.full_sequences is None or other.full_sequences >= 1):
            held = "" if other.full_sequences is None else f", {other.full_sequences} full-length sequences per DP rank"
            options.append(f"TP={tp} x DP={dp} ({tp * dp} dies: {gb(other.weights)} GB of weights per die{held})")
            break
    lighter = QUANTIZED.get(profile.name or "")
    if lighter:
        other = instance_fit(ModelProfile(name=lighter, **CATALOG[lighter]), inst, fit.die_mb)
        if other.loads:
            options.append(f"the quantized profile: {lighter} ({gb(other.weights)} GB of weights per die at "
                           f"TP{inst.tp} x DP{inst.dp})")
    elif WEIGHT_BYTES[profile.weights] >= 2:
        other = instance_fit(profile, inst, fit.die_mb, weights="w8a8")
        if other.loads:
            options.append(f"W8A8 weights (weights: w8a8, {gb(other.weights)} GB per die)")
    top = _max_util(fit.die_mb)
    if top > fit.utilization and instance_fit(profile, inst, fit.die_mb, util=top).loads:
        options.append(f"--gpu-memory-utilization {top}")
    return ", or ".join(options) or "spread it over more dies (TP x DP) or use a smaller or quantized model"


def _fewer_tokens(profile: ModelProfile, inst: InstanceSpec, fit: DieFit, nodes: dict[str, NodeFacts]) -> str:
    options = [f"max_model_len: {_round_down(fit.kv_tokens)}"] if fit.kv_tokens else []
    for tp, dp in _layouts(profile, inst, nodes):
        other = instance_fit(profile, inst, fit.die_mb, tp=tp, dp=dp)
        if other.full_sequences and other.full_sequences >= 1:
            options.append(f"TP={tp} x DP={dp} ({other.full_sequences} full-length sequences per DP rank)")
            break
    return ", or ".join(options) or "spread it over more dies (TP x DP)"
