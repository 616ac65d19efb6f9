"""The HBM fit check (issue 16, docs/hbm-fit.md): the catalog's weight sizes against the published checkpoints, the
reference topology passes, oversized instances fail naming the figures and a fix that works, tight ones warn, and a
deploy of a topology that cannot fit is refused before any process starts."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from apps.deployments.topology import NodeFacts, SpecError, build_plan, spec_from_dict, validate_topology
from apps.deployments.topology.hbm_fit import (
    IDLE_USED_MB,
    GiB,
    MiB,
    fit_estimates,
    instance_fit,
    weight_bytes,
)
from apps.deployments.topology.model_catalog import CATALOG
from apps.deployments.topology.plan_warnings import plan_warnings
from apps.deployments.topology.spec import ModelProfile

A3_DIE_MB = 65536  # npu-smi's HBM total of an Atlas 800I A3 die (simcluster/npusmi.py, docs/hbm-fit.md)
TOLERANCE = 0.05  # the estimate leaves out scales and buffers: within 5% of what the checkpoint holds

# Published sizes of the checkpoints, in bytes (10^9 per GB as the hubs count; sources in docs/hbm-fit.md).
PUBLISHED = [
    # Qwen/Qwen3-235B-A22B: 235B parameters in BF16 safetensors, 470 GB.
    ("qwen3-235b-a22b", "bfloat16", 470e9),
    # deepseek-ai/DeepSeek-R1: the FP8 checkpoint, 688.6 GB; it also holds the 14B MTP layer (about 2%) that
    # serving without speculative decoding does not load.
    ("deepseek-r1", "fp8", 688.6e9),
    # The same model as BF16 (what vllm-ascend loads from a dequantised copy): 671B x 2 bytes, 1.34 TB.
    ("deepseek-r1", "bfloat16", 1342e9),
]


def profile(name: str) -> ModelProfile:
    return ModelProfile(name=name, **CATALOG[name])


def a3(nodes: dict[str, NodeFacts]) -> dict[str, NodeFacts]:
    return {n: dataclasses.replace(f, die_hbm_mb=A3_DIE_MB if f.npu_count else None) for n, f in nodes.items()}


def hbm_problems(data: dict, nodes: dict[str, NodeFacts]):
    return [p for p in validate_topology(spec_from_dict(data), nodes) if "HBM" in p.message or "budget" in p.message
            or "KV cache" in p.message or "gpu-memory-utilization" in p.message]


@pytest.mark.parametrize("name, weights, published", PUBLISHED)
def test_the_catalog_weighs_what_the_published_checkpoint_holds(name, weights, published):
    estimate = weight_bytes(profile(name), weights)
    assert abs(estimate - published) <= TOLERANCE * published, (name, weights, estimate / 1e9)


def test_w8a8_deepseek_fits_one_a3_node_as_the_vllm_ascend_tutorial_says_and_bf16_does_not(fixed_data, nodes):
    """vllm-ascend's DeepSeek-R1 tutorial: the W8A8 model needs one Atlas 800 A3 (64G x 16) node; the BF16 one
    (1.34 TB) cannot fit 16 x 64 GB at all."""
    inst = spec_from_dict(fixed_data).instance("p0")  # TP16 on one 16-die node
    w8a8 = instance_fit(profile("deepseek-r1-w8a8"), inst, A3_DIE_MB)
    assert w8a8.loads and w8a8.full_sequences >= 1
    assert 0.9 < weight_bytes(profile("deepseek-r1-w8a8")) / weight_bytes(profile("deepseek-r1"), "fp8") < 1.05
    assert not instance_fit(profile("deepseek-r1"), inst, A3_DIE_MB).loads


def test_the_reference_topology_fits_and_every_instance_has_its_figures(fixed_data, nodes):
    nodes = a3(nodes)
    spec = spec_from_dict(fixed_data)
    assert spec.model.profile.name == "qwen3-235b-a22b"  # the seed names its catalog profile
    assert validate_topology(spec, nodes) == []
    fits = {f.instance: f for f in fit_estimates(spec, nodes)}
    assert set(fits) == {"p0", "p1", "d0", "d1"}
    # p0: TP16, the whole model over 16 dies
    assert fits["p0"].weights == pytest.approx(weight_bytes(spec.model.profile) / 16, rel=0.01)
    # d0: TP4 x DP4, attention over 4 dies, the routed experts over all 16
    p = spec.model.profile
    expected = (p.params_b - p.expert_params_b) * 2e9 / 4 + p.expert_params_b * 2e9 / 16
    assert fits["d0"].weights == pytest.approx(expected)
    for fit in fits.values():
        assert fit.starts and fit.loads and fit.full_sequences >= 1
        assert fit.weights + fit.reserve + fit.kv == pytest.approx(fit.budget)
    # GQA: 4 KV heads split over TP4 (one per die), one each over TP16 too
    assert fits["d0"].kv_token_bytes == 2 * 94 * 1 * 128 * 2 == fits["p0"].kv_token_bytes
    plan = build_plan(spec, nodes)
    assert [f.instance for f in plan.hbm] == ["p0", "p1", "d0", "d1"]


def test_the_two_node_decode_example_fits_with_the_mla_latent_on_every_die(nodes):
    from pathlib import Path

    from apps.deployments.topology import spec_from_yaml
    text = (Path(__file__).resolve().parents[2] / "examples" / "docs" / "two-node-decode.yaml").read_text()
    spec = spec_from_yaml(text)
    nodes = {f"node{i}": NodeFacts(f"node{i}", f"192.0.0.{i}", frozenset(range(16)), 16, die_hbm_mb=A3_DIE_MB)
             for i in range(5)}
    assert spec.model.profile.name == "deepseek-r1-w8a8"
    assert validate_topology(spec, nodes) == []
    fits = {f.instance: f for f in fit_estimates(spec, nodes)}
    assert fits["d0"].kv_token_bytes == 61 * 576 * 2  # MLA: the whole latent on each TP1 die
    assert fits["d0"].full_sequences < 40  # 40 sequences of 40000 tokens do not all fit: a warning, not a problem
    warned = [w for w in plan_warnings(spec, nodes) if w.path == "instances[2].max_num_seqs"]
    assert len(warned) == 1 and f"{fits['d0'].full_sequences} full-length (40000-token) sequences" in warned[0].message


def test_qwen_on_one_die_per_decode_instance_cannot_load_and_the_suggested_layout_fits(fixed_data, nodes):
    nodes = a3(nodes)
    for inst in fixed_data["instances"][2:]:
        inst.update(tp=1, dp=1)
        inst.pop("dp_rpc_port")
    (problem, other) = hbm_problems(fixed_data, nodes)
    assert problem.path == "instances[2].tp" and other.path == "instances[3].tp"
    one_die = round(weight_bytes(profile("qwen3-235b-a22b")) / GiB, 1)  # TP1 x DP1: the whole model on one die
    assert problem.message.startswith(f"d0 cannot load its weights: per die {one_die} GB of weights + ")
    assert "exceed the budget of 60.2 GB (0.94 x 64.0 GB)" in problem.message
    # the fewest dies that load it (8, keeping TP4 like the prefill-compatible original), and what that holds
    assert problem.suggestion.startswith("TP=4 x DP=2 (8 dies: 56.6 GB of weights per die, 1 full-length sequences")
    assert "W8A8 weights (weights: w8a8" not in problem.suggestion  # halved, 219 GB still do not fit one die
    for inst in fixed_data["instances"][2:]:
        inst.update(tp=4, dp=2, dp_rpc_port=12321)
    assert validate_topology(spec_from_dict(fixed_data), nodes) == []


def test_deepseek_bf16_at_tp8_on_one_node_fails_and_its_fixes_fit(fixed_data, nodes):
    nodes = a3(nodes)
    fixed_data["model"] = {"path": "/models/DeepSeek-R1", "served_name": "ds", "profile": "deepseek-r1"}
    fixed_data["instances"] = fixed_data["instances"][:1] + fixed_data["instances"][2:3]
    fixed_data["instances"][0].update(tp=8, devices=list(range(8)))
    fixed_data["instances"][1].update(tp=8, dp=1, devices=list(range(8)))
    problems = hbm_problems(fixed_data, nodes)
    assert [p.path for p in problems] == ["instances[0].tp", "instances[1].tp"]
    p0 = problems[0]
    per_die = round(weight_bytes(profile("deepseek-r1")) / 8 / GiB, 1)
    assert f"p0 cannot load its weights: per die {per_die} GB of weights" in p0.message
    layout = p0.suggestion.split(" (")[0]
    assert layout.startswith("TP=8 x DP=")
    tp, dp = (int(x.split("=")[1]) for x in layout.split(" x "))
    spec = spec_from_dict(fixed_data)
    fixed = instance_fit(spec.model.profile, spec.instance("p0"), A3_DIE_MB, tp=tp, dp=dp)
    assert fixed.loads and not instance_fit(spec.model.profile, spec.instance("p0"), A3_DIE_MB, tp=tp, dp=dp // 2).loads
    # the quantized profile at 16 dies per instance, as the multi-node tutorial runs it, fits
    fixed_data["model"]["profile"] = "deepseek-r1-w8a8"
    for inst in fixed_data["instances"]:
        inst.update(tp=8, dp=2, dp_rpc_port=12321, devices=None)
    assert hbm_problems(fixed_data, nodes) == []


def test_a_utilization_the_idle_die_leaves_no_room_for_is_refused(fixed_data, nodes):
    nodes = a3(nodes)
    fixed_data["instances"][2]["extra_args"][2] = "0.97"  # --gpu-memory-utilization 0.94 -> 0.97
    (problem,) = hbm_problems(fixed_data, nodes)
    assert problem.path == "instances[2].extra_args[2]"
    free_gb = round((A3_DIE_MB - IDLE_USED_MB) / 1024, 1)
    assert f"asks for {round(0.97 * A3_DIE_MB / 1024, 1)} GB of a 64.0 GB die, but {free_gb} GB are free" in \
        problem.message and "vLLM refuses to start" in problem.message
    top = problem.suggestion.split()[2]
    assert problem.suggestion == f"use --gpu-memory-utilization {top} or lower"
    fixed_data["instances"][2]["extra_args"][2] = top
    assert hbm_problems(fixed_data, nodes) == []
    fixed_data["instances"][2]["extra_args"][2] = f"{float(top) + 0.01:.2f}"
    assert len(hbm_problems(fixed_data, nodes)) == 1


def test_a_cache_smaller_than_one_max_model_len_sequence_is_refused_with_the_length_that_fits(fixed_data, nodes):
    nodes = a3(nodes)
    fixed_data["instances"][2]["max_model_len"] = 4_000_000
    (problem,) = hbm_problems(fixed_data, nodes)
    assert problem.path == "instances[2].max_model_len"
    assert "less than one max_model_len 4000000 sequence: vLLM refuses to start" in problem.message
    length = int(problem.suggestion.split()[1].rstrip(","))
    fixed_data["instances"][2]["max_model_len"] = length
    assert hbm_problems(fixed_data, nodes) == []


def test_tight_headroom_and_too_many_full_length_sequences_warn(fixed_data, nodes):
    nodes = a3(nodes)
    spec = spec_from_dict(fixed_data)
    warned = {w.path: w for w in plan_warnings(spec, nodes) if "HBM" in str(w) or "KV cache" in str(w)
              or "budget" in str(w)}
    d0 = next(f for f in fit_estimates(spec, nodes) if f.instance == "d0")
    seqs = warned["instances[2].max_num_seqs"]
    assert f"holds {d0.kv_tokens:,} tokens, {d0.full_sequences} full-length (32768-token) sequences for " \
           f"max_num_seqs 40" in seqs.message
    assert seqs.suggestion.startswith(f"lower max_num_seqs to {d0.full_sequences}")
    util = warned["instances[2].extra_args[2]"]  # 0.94 leaves about half a GB beside the idle die's use
    assert d0.headroom < 1024 * MiB and "leaves 0.5 GB of a die outside vLLM's budget" in util.message
    assert "instances[0].max_num_seqs" not in warned and "instances[0].extra_args[6]" not in warned  # p0 fits


def test_a_profile_without_sizes_or_dies_of_unknown_hbm_skip_the_check_with_a_warning(fixed_data, nodes):
    spelt = {k: v for k, v in CATALOG["qwen3-235b-a22b"].items() if k in ("layers", "kv_heads", "head_dim", "dtype",
                                                                         "attention_heads")}
    data = copy.deepcopy(fixed_data)
    data["model"]["profile"] = spelt
    spec = spec_from_dict(data)
    assert fit_estimates(spec, a3(nodes)) == ()
    (warning,) = [w for w in plan_warnings(spec, a3(nodes)) if w.path == "model.profile"]
    assert "has no sizes, so the HBM fit check cannot run" in warning.message
    assert "qwen3-235b-a22b | deepseek-r1 | deepseek-r1-w8a8" in warning.suggestion and "params_b" in warning.suggestion
    # sizes given but the nodes' die HBM unknown: no figures, no problem, one warning naming the instances
    spec = spec_from_dict(fixed_data)
    assert fit_estimates(spec, nodes) == () and validate_topology(spec, nodes) == []
    (unknown,) = [w for w in plan_warnings(spec, nodes) if w.path == "instances"]
    assert "the HBM of the dies of p0, p1, d0, d1 is unknown" in unknown.message


def test_a_spelt_out_profile_with_sizes_is_checked_like_the_catalog_one(fixed_data, nodes):
    data = copy.deepcopy(fixed_data)
    data["model"]["profile"] = dict(CATALOG["qwen3-235b-a22b"])
    spelt, named = spec_from_dict(data), spec_from_dict(fixed_data)
    assert spelt.model.profile.name is None
    assert fit_estimates(spelt, a3(nodes)) == fit_estimates(named, a3(nodes))


@pytest.mark.parametrize("profile_value, path, words", [
    ("qwen3-999b", "model.profile", "unknown model profile 'qwen3-999b'; known profiles: qwen3-235b-a22b, "
                                    "deepseek-r1, deepseek-r1-w8a8"),
    (7, "model.profile", "expected a catalog name (qwen3-235b-a22b, deepseek-r1, deepseek-r1-w8a8) or a mapping"),
    ({"params_b": "lots"}, "model.profile.params_b", "expected a number of parameters in billions"),
    ({"params_b": 10, "expert_params_b": 12}, "model.profile.expert_params_b", "more than params_b 10"),
    ({"expert_params_b": 2}, "model.profile.expert_params_b", "needs params_b"),
    ({"weights": "int3"}, "model.profile.weights", "expected one of float32, bfloat16, float16, fp8, w8a8"),
    ({"experts": 0}, "model.profile.experts", "expected a positive integer"),
    ({"vram": 1}, "model.profile.vram", "unknown field"),
])
def test_bad_profiles_name_the_field(fixed_data, profile_value, path, words):
    base = {"layers": 94, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16", "attention_heads": 64}
    fixed_data["model"]["profile"] = {**base, **profile_value} if isinstance(profile_value, dict) else profile_value
    with pytest.raises(SpecError) as err:
        spec_from_dict(fixed_data)
    found = dict(err.value.errors)
    assert path in found and words in found[path], err.value.errors


def test_a_catalog_profile_round_trips_as_its_name(fixed_data):
    from apps.deployments.topology import spec_to_dict
    spec = spec_from_dict(fixed_data)
    assert spec_to_dict(spec)["model"]["profile"] == "qwen3-235b-a22b"
    assert spec_from_dict(spec_to_dict(spec)) == spec


# --- the inventory's die HBM and the job start --------------------------------------------------------------------

@pytest.mark.django_db
def test_die_hbm_comes_from_discovered_dies_then_the_hardware_model(ref_cluster):
    from apps.deployments.inventory_lookup import cluster_facts
    from apps.inventory.models import Node, Npu

    assert cluster_facts(ref_cluster)["node0"].die_hbm_mb is None  # nothing known about the node yet
    Node.objects.filter(cluster=ref_cluster, name="node0").update(hardware_model="Atlas 800I A3")
    assert cluster_facts(ref_cluster)["node0"].die_hbm_mb == A3_DIE_MB
    node = Node.objects.get(cluster=ref_cluster, name="node0")
    for i in range(2):
        Npu.objects.create(node=node, npu_id=0, chip_id=i, logical_id=i, phy_id=i, name="Ascend910",
                           hbm_total_mb=32768 + i, hbm_used_mb=3200)
    assert cluster_facts(ref_cluster)["node0"].die_hbm_mb == 32768  # what npu-smi read wins, the smallest die


@pytest.mark.django_db
def test_a_deploy_of_a_topology_that_cannot_fit_is_refused_before_any_process_starts(
        api_client_for, ref_cluster, fixed_yaml, make_user, monkeypatch):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Node
    from apps.jobs import tasks
    from apps.jobs.models import Job

    started = []
    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: started.append(a))
    oversized = fixed_yaml.replace("max_model_len: 32768\n    max_num_seqs: 40", "max_model_len: 4000000\n"
                                   "    max_num_seqs: 40", 1)
    assert oversized != fixed_yaml
    # saved while the nodes' hardware is unknown: the fit check cannot run, the save goes through
    deployment = deployment_create(name="oversized", cluster=ref_cluster, user=make_user("operator", "owner"),
                                   yaml_text=oversized)
    Node.objects.filter(cluster=ref_cluster, npu_count=16).update(hardware_model="Atlas 800I A3")
    response = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/deploy/", {}, format="json")
    assert response.status_code == 400, response.content
    body = response.content.decode()
    assert "max_model_len" in body and "vLLM refuses to start" in body
    assert not Job.objects.exists() and not started and not Process.objects.exists()


@pytest.mark.django_db
def test_the_plan_page_and_the_topology_snapshot_show_each_instances_hbm(client, make_user, deployment):
    from apps.inventory.models import Node
    from apps.telemetry.topology_snapshot import topology_snapshot

    Node.objects.filter(cluster=deployment.cluster, npu_count=16).update(hardware_model="Atlas 800I A3")
    client.force_login(make_user("viewer", username="hbm-viewer"))
    html = client.get(f"/deployments/{deployment.pk}/plan/").content.decode()
    assert 'id="hbm-fit"' in html and html.count('<tr data-instance="') == 4
    assert "# HBM per die (docs/hbm-fit.md):" in html
    assert "d0 (TP4 x DP4) per die of 64 GB: weights 30.2 GB" in html
    snap = topology_snapshot(deployment)
    d0 = next(i for i in snap["instances"] if i["name"] == "d0")
    assert d0["hbm"]["weights_gb"] == 30.2 and d0["hbm"]["die_gb"] == 64.0
    assert d0["hbm"]["full_sequences"] == d0["hbm"]["kv_tokens"] // 32768 and d0["hbm"]["status"] == "tight"
