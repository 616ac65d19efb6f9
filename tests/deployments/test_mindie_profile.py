"""launch_profile mindie and expert parallelism, without a cluster: what user_config.json says for the Ascend
article's layout, what validation refuses (each problem naming its field), and the parsing of kubectl's pod list."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from apps.deployments.topology import (
    AllowedImage,
    ClusterAllowlist,
    NodeFacts,
    SpecError,
    build_plan,
    plan_to_text,
    spec_from_dict,
    spec_to_dict,
    validate_topology,
)
from sshexec import mindie_commands
from tests.deployments.test_profiles_golden import check_golden

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "mindie"
SIM_SCRIPTS = "/var/lib/pdcp-sim/mindie/kubernetes_deploy_scripts"
SIM_IMAGE = "mindie:2.1.RC1-800I-A3-py311-openeuler24.03-lts-aarch64"
# What the clusters' admins allow (Cluster.allowlist): the simulated cluster's, as simcluster's inventory says it
SIM_ALLOWLIST = ClusterAllowlist(images=(AllowedImage(SIM_IMAGE),), weights=("/models",), mindie_scripts=(SIM_SCRIPTS,))
ARTICLE_DIGEST = "sha256:" + "5a" * 32
ARTICLE_ALLOWLIST = ClusterAllowlist(
    images=(AllowedImage("mindie:2.1.RC1-800I-A2-py311-openeuler24.03-lts", ARTICLE_DIGEST),),
    weights=("/home/weight",), mindie_scripts=("/home/mindie/kubernetes_deploy_scripts",))


def sim_nodes() -> dict[str, NodeFacts]:
    nodes = {f"node{i}": NodeFacts(f"node{i}", f"127.0.10.{75 + i}", frozenset(range(16)), 16, is_sim=True)
             for i in range(6)}
    nodes["ms"] = NodeFacts("ms", "127.0.10.81", frozenset(), 0, is_sim=True)
    return nodes


def article_nodes() -> dict[str, NodeFacts]:
    nodes = {f"a2-{i:02d}": NodeFacts(f"a2-{i:02d}", f"10.0.0.{i}", frozenset(range(8)), 8, die_hbm_mb=65536)
             for i in range(1, 17)}
    nodes["k8s-master"] = NodeFacts("k8s-master", "10.0.0.100", frozenset(), 0)
    return nodes


def example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def problems(data: dict, nodes=None, allowlist=SIM_ALLOWLIST) -> dict[str, str]:
    return {p.path: p.message for p in validate_topology(spec_from_dict(data), nodes or sim_nodes(), allowlist)}


def test_the_article_layout_renders_4_prefill_and_1_decode_instances_with_moe_ep():
    plan = build_plan(spec_from_dict(example("article.yaml")), article_nodes(), ARTICLE_ALLOWLIST)
    config = json.loads(plan.mindie.user_config)
    deploy = config["deploy_config"]
    # the image the topology names, pinned by the digest the cluster's admin gave
    assert deploy["image_name"] == f"mindie:2.1.RC1-800I-A2-py311-openeuler24.03-lts@{ARTICLE_DIGEST}"
    assert (deploy["p_instances_num"], deploy["d_instances_num"]) == (4, 1)
    assert (deploy["single_p_instance_pod_num"], deploy["single_d_instance_pod_num"]) == (2, 8)
    assert (deploy["p_pod_npu_num"], deploy["d_pod_npu_num"]) == (8, 8)
    assert deploy["hardware_type"] == "800I_A2" and deploy["job_id"] == "mindie"
    prefill = config["mindie_server_prefill_config"]
    decode = config["mindie_server_decode_config"]
    p_model = prefill["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    d_model = decode["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert (p_model["dp"], p_model["tp"], p_model["moe_ep"], p_model["moe_tp"], p_model["worldSize"]) == (2, 8, 4, 4, 8)
    assert (d_model["dp"], d_model["tp"], d_model["moe_ep"], d_model["moe_tp"]) == (64, 1, 64, 1)
    # The article's sample: Prefill is one model over two servers, Decode is DP spread over its servers.
    assert prefill["BackendConfig"]["multiNodesInferEnabled"] and not prefill["ServerConfig"]["distDPServerEnabled"]
    assert decode["ServerConfig"]["distDPServerEnabled"] and not decode["BackendConfig"]["multiNodesInferEnabled"]
    assert deploy["decode_distribute_enable"] == 1 and deploy["prefill_distribute_enable"] == 0
    assert prefill["BackendConfig"]["ScheduleConfig"] == {"maxPrefillBatchSize": 16, "maxPrefillTokens": 6144}
    assert decode["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 64
    assert config["mindie_ms_controller_config"]["deploy_mode"] == "pd_separate"
    assert len([p for p in plan.processes if p.role == "prefill"]) == 8  # pods: one per server
    assert len([p for p in plan.processes if p.role == "decode"]) == 8


def test_sim_layout_golden_user_config_with_extra_merged():
    plan = build_plan(spec_from_dict(example("article-sim.yaml")), sim_nodes(), SIM_ALLOWLIST)
    check_golden("mindie-article-sim.user_config.json", plan.mindie.user_config)
    config = json.loads(plan.mindie.user_config)
    assert config["mindie_ms_controller_config"]["digs_decode_slo"] == 50  # from extra
    d_model = config["mindie_server_decode_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert d_model["kv_trans_timeout"] == 10 and d_model["moe_ep"] == 32  # extra adds to the rendered model


def test_plan_text_says_every_command_the_deploy_host_runs():
    plan = build_plan(spec_from_dict(example("article-sim.yaml")), sim_nodes(), SIM_ALLOWLIST)
    text = plan_to_text(plan)
    assert ("cd /var/lib/pdcp-sim/mindie/kubernetes_deploy_scripts && python3 deploy_ac_job.py --user_config_path "
            "/home/simnode/pdcp-runs/mindie-article/user_config.json") in text
    assert "kubectl logs -n mindie -l app=mindie-ms-coordinator --tail=-1" in text
    assert "bash delete.sh mindie" in text and '"p_instances_num": 4' in text


def test_a_path_with_shell_characters_is_quoted_in_every_command():
    data = example("article-sim.yaml")
    data["mindie"]["scripts_dir"] = "/opt/mindie; rm -rf ~"  # the admin's allowlist refuses it; the renderer quotes
    plan = build_plan(spec_from_dict(data), sim_nodes(), dataclasses.replace(SIM_ALLOWLIST, mindie_scripts=(
        "/opt/mindie; rm -rf ~",)))
    assert "cd '/opt/mindie; rm -rf ~' && python3" in plan.mindie.deploy


def test_spec_round_trips_through_plain_data():
    spec = spec_from_dict(example("article-sim.yaml"))
    assert spec_from_dict(spec_to_dict(spec)) == spec


@pytest.mark.parametrize(("edit", "path", "words"), [
    (lambda d: d["instances"][0].update(ep_size=3), "instances[0].ep_size", "does not fit its 16 devices"),
    (lambda d: d["instances"][0].update(expert_parallel=False), "instances[0].ep_size", "without expert_parallel"),
    (lambda d: d["instances"][4].update(ep_size=24), "instances[4].ep_size", "does not fit its 32 devices"),
    (lambda d: d["instances"][1].update(ep_size=8), "instances[1].ep_size", "EP size differs"),
    (lambda d: d.update(kv_pool={"node": "ms"}), "kv_pool", "not used by launch_profile mindie"),
    (lambda d: d["proxy"].update(policy="least_conn"), "proxy.policy", "MindIE's coordinator"),
    (lambda d: d["instances"][0].update(extra_args=["--enforce-eager"]), "instances[0].extra_args", "no engine"),
    (lambda d: d["mindie"].update(deploy_host="nowhere"), "mindie.deploy_host", "not in the cluster"),
    (lambda d: d["mindie"]["extra"].update(deploy_config={"p_instances_num": 9}),
     "mindie.extra.deploy_config.p_instances_num", "rendered from the topology"),
    (lambda d: d["mindie"]["extra"].update(mindie_server_prefill_config={"BackendConfig": {"ModelDeployConfig": {
        "ModelConfig": [{"moe_ep": 2}]}}}),
     "mindie.extra.mindie_server_prefill_config.BackendConfig.ModelDeployConfig.ModelConfig[0].moe_ep", "rendered"),
    (lambda d: d.pop("mindie"), "mindie", "needs a mindie block"),
    (lambda d: d.update(launch_profile="vllm-ascend"), "mindie", "read only by launch_profile mindie"),
])
def test_validation_names_the_field(edit, path, words):
    data = example("article-sim.yaml")
    edit(data)
    found = problems(data)
    assert path in found, found
    assert words in found[path]


def test_vllm_takes_no_ep_size_other_than_its_tp_times_dp():
    data = example("article-sim.yaml")
    data["launch_profile"] = "sim"
    data.pop("mindie")
    data["proxy"] = {"node": "ms", "port": 1999}
    for i, inst in enumerate(data["instances"]):
        inst["api_port"], inst["kv_port"] = 7100, 30000 + 100 * i
    found = problems(data)
    assert "vLLM's expert-parallel group is always TP x DP = 16" in found["instances[0].ep_size"]
    for inst in data["instances"]:
        inst.pop("ep_size")
    assert not any(p.endswith("ep_size") for p in problems(data))
    plan = build_plan(spec_from_dict(data), sim_nodes())  # no allowlist: a vLLM topology names no image or dir
    assert all("--enable-expert-parallel" in p.launch.argv for p in plan.processes if p.role in ("prefill", "decode"))


def test_ep_must_split_the_model_experts():
    spec = spec_from_dict(example("article-sim.yaml"))
    profile = dataclasses.replace(spec.model.profile, experts=100)  # 100 experts over EP32: uneven
    spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, profile=profile))
    found = {p.path: p.message for p in validate_topology(spec, sim_nodes(), SIM_ALLOWLIST)}
    assert "routed experts do not split evenly over EP32" in found["instances[4].ep_size"]


@pytest.mark.parametrize(("field", "value", "path"), [
    ("job_id", "Not_A_Namespace", "mindie.job_id"),
    ("scripts_dir", "relative/dir", "mindie.scripts_dir"),
    ("hardware_type", "910C", "mindie.hardware_type"),
    ("extra", {"a": float("nan")}, "mindie.extra.a"),
    ("extra", ["not", "an", "object"], "mindie.extra"),
    ("prefill", {"maxPrefillBatchSize": 4}, "mindie.prefill.maxPrefillBatchSize"),
    ("ready_timeout_s", 1, "mindie.ready_timeout_s"),
])
def test_bad_mindie_fields_are_named(field, value, path):
    data = example("article-sim.yaml")
    data["mindie"][field] = value
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data)
    assert path in dict(caught.value.errors), caught.value.errors


def test_kubectl_pod_list_parses_and_bad_output_is_named():
    doc = {"items": [{"metadata": {"name": "mindie-server-p0-0", "labels": {"app": "mindie-server", "role": "prefill"}},
                      "spec": {"nodeName": "node0", "containers": [{"ports": [{"containerPort": 1025}]}]},
                      "status": {"podIP": "127.0.10.75", "phase": "Running",
                                 "containerStatuses": [{"ready": True}]}}]}
    pod, = mindie_commands.parse_pods(json.dumps(doc))
    assert (pod.role, pod.ip, pod.ports, pod.ready, pod.node) == ("prefill", "127.0.10.75", (1025,), True, "node0")
    with pytest.raises(ValueError, match="did not print JSON"):
        mindie_commands.parse_pods("error: the server doesn't have a resource type")
    with pytest.raises(ValueError, match=r"items\[0\].metadata.name"):
        mindie_commands.parse_pods('{"items": [{"metadata": {}}]}')


def test_pods_are_matched_in_mindies_numbering_not_alphabetically():
    names = ["mindie-server-10-master-0", "mindie-server-2-worker-0", "mindie-server-2-master-0"]
    assert sorted(names, key=mindie_commands.natural_key) == [
        "mindie-server-2-master-0", "mindie-server-2-worker-0", "mindie-server-10-master-0"]


def test_the_make_run_demo_renders_on_the_reference_cluster():
    nodes = {f"node{i}": NodeFacts(f"node{i}", f"127.0.10.{i + 1}", frozenset(range(16)), 16, is_sim=True)
             for i in range(4)}
    nodes.update({n: NodeFacts(n, f"127.0.10.{a}", frozenset(), 0, is_sim=True) for n, a in (("proxy", 5), ("bench", 6))})
    config = json.loads(build_plan(spec_from_dict(example("demo-sim.yaml")), nodes, SIM_ALLOWLIST).mindie.user_config)
    deploy = config["deploy_config"]
    assert (deploy["p_instances_num"], deploy["d_instances_num"], deploy["single_d_instance_pod_num"]) == (2, 1, 2)
    assert config["mindie_ms_coordinator_config"]["http_config"]["predict_ip"] == "127.0.10.5"


def _leaf_paths(tree, prefix=""):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaf_paths(value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(tree, list) and tree and isinstance(tree[0], dict):
        yield from _leaf_paths(tree[0], f"{prefix}[0]")
    else:
        yield prefix


def test_every_rendered_field_is_one_extra_may_not_set():
    """RENDERED (what mindie.extra can never set) covers every field the renderer writes, in every layout."""
    from apps.deployments.topology.profiles.mindie_config import RENDERED, rendered_config

    listed = set(_leaf_paths(RENDERED))
    for name, nodes, allowlist in (("article.yaml", article_nodes(), ARTICLE_ALLOWLIST),
                                   ("article-sim.yaml", sim_nodes(), SIM_ALLOWLIST)):
        rendered = set(_leaf_paths(rendered_config(spec_from_dict(example(name)), nodes, allowlist)))
        assert rendered <= listed, rendered - listed


def test_listed_tuning_keys_with_plain_values_pass():
    data = example("article-sim.yaml")
    data["mindie"]["extra"] = {
        "mindie_ms_controller_config": {"digs_prefill_slo": 1000, "digs_decode_slo": 50.5},
        "mindie_ms_coordinator_config": {"exception_config": {"infer_timeout": 600}},
        "mindie_server_decode_config": {"BackendConfig": {
            "ScheduleConfig": {"templateType": "Standard", "supportSelectBatch": True},
            "ModelDeployConfig": {"ModelConfig": [{"kv_trans_timeout": 10, "backendType": "atb"}]}}},
    }
    assert problems(data) == {}
    data["mindie"]["extra"]["mindie_server_decode_config"]["BackendConfig"]["ScheduleConfig"]["templateType"] = "Evil"
    data["mindie"]["extra"]["mindie_ms_controller_config"]["digs_prefill_slo"] = True
    found = problems(data)
    assert "expected one of Standard, Mix" in found[
        "mindie.extra.mindie_server_decode_config.BackendConfig.ScheduleConfig.templateType"]
    assert "expected a number from 0, got True" in found["mindie.extra.mindie_ms_controller_config.digs_prefill_slo"]
