"""user_config.json validation (simcluster/mindie/userconfig.py), placement and the coordinator's choice of P and D,
without processes."""

import json

import pytest

from simcluster.mindie import placement, routing, userconfig
from tests.simcluster.mindie_helpers import sample_config, user_config


def test_the_published_sample_is_valid():
    cfg = userconfig.validate(sample_config())
    assert (cfg.job_id, cfg.hardware, cfg.predict_port, cfg.manage_port) == ("mindie", "A3", 1025, 1026)
    assert (cfg.prefill.instances, cfg.prefill.tp, cfg.prefill.dp_per_pod) == (2, 16, 1)
    assert (cfg.decode.pods_per_instance, cfg.decode.dp, cfg.decode.dp_per_pod, cfg.decode.moe_ep) == (2, 32, 16, 32)


MODEL = "mindie_server_prefill_config.BackendConfig.ModelDeployConfig.ModelConfig.0"


@pytest.mark.parametrize("path, value, message", [
    ("deploy_config.d_instances_num", 0, "deploy_config.d_instances_num must be an integer from 1 to 20, got 0"),
    ("deploy_config.single_p_instance_pod_num", 9, "deploy_config.single_p_instance_pod_num must be an integer "
                                                   "from 1 to 8"),
    ("deploy_config.hardware_type", "800I_A5", "deploy_config.hardware_type must be '800I_A2' or '800I_A3'"),
    ("deploy_config.p_instances_scale_num", 1, "deploy_config.p_instances_scale_num: the simulator deploys only"),
    ("deploy_config.tls_config.tls_enable", "yes", "deploy_config.tls_config.tls_enable must be true or false"),
    ("mindie_ms_controller_config.deploy_mode", "single_node", "mindie_ms_controller_config.deploy_mode"),
    ("mindie_ms_coordinator_config.http_config.manage_port", "80", "http_config.manage_port must be a port"),
    ("mindie_server_decode_config.ServerConfig.inferMode", "standard", "ServerConfig.inferMode must be 'dmi'"),
    (f"{MODEL}.tp", 3, f"{MODEL}.dp x tp (1 x 3) must equal the NPUs of one prefill instance"),
    (f"{MODEL}.modelName", "", f"{MODEL}.modelName must be a string"),
    ("mindie_server_prefill_config.BackendConfig.ModelDeployConfig.maxInputTokenLen", 99999,
     "maxInputTokenLen (99999) must not exceed maxSeqLen (8192)"),
])
def test_a_bad_field_is_named(path, value, message):
    doc = user_config("j")
    node = doc
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = value
    with pytest.raises(userconfig.ConfigError) as err:
        userconfig.validate(doc)
    assert message in str(err.value)


def test_moe_ep_1_means_no_expert_parallelism():
    doc = user_config("j")
    doc["mindie_server_prefill_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["moe_ep"] = 1
    assert userconfig.validate(doc).prefill.moe_ep == 1


def test_a_missing_field_and_bad_json_are_named(tmp_path):
    doc = user_config("j")
    del doc["mindie_server_decode_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["moe_ep"]
    with pytest.raises(userconfig.ConfigError, match=r"ModelConfig\.0\.moe_ep is missing"):
        userconfig.validate(doc)
    (tmp_path / "u.json").write_text(json.dumps(user_config("j"))[:-5])
    with pytest.raises(userconfig.ConfigError, match="is not JSON: line 1"):
        userconfig.load(tmp_path / "u.json")


def test_first_fit_takes_the_lowest_free_dies_and_slots(tmp_path):
    nodes = [placement.Node("c", "10.0.0.1", "", 0, tmp_path), placement.Node("a", "10.0.0.2", "A3", 16, tmp_path),
             placement.Node("b", "10.0.0.3", "A3", 16, tmp_path)]
    nodes[1].used.update({0, 1})
    first = placement.place_server(nodes, "A3", 8)
    second = placement.place_server(nodes, "A3", 8)
    assert (first[0].name, first[1]) == ("a", [2, 3, 4, 5, 6, 7, 8, 9])
    assert (second[0].name, second[1]) == ("b", list(range(8)))
    assert placement.place_server(nodes, "910B", 1) is None
    assert placement.control_node(nodes, "b").name == "c"
    assert [nodes[2].take_slot(), nodes[2].take_slot()] == [0, 1]


def test_the_coordinator_picks_the_least_loaded_instance_then_pod():
    plan = {"instances": [
        {"role": "prefill", "instance": 0, "pods": [{"name": "p0", "url": "http://x:1"}]},
        {"role": "prefill", "instance": 1, "pods": [{"name": "p1", "url": "http://x:2"}]},
        {"role": "decode", "instance": 2, "pods": [{"name": "d0", "url": "http://x:3"},
                                                   {"name": "d1", "url": "http://x:4"}]}]}
    instances = routing.instances_from_plan(plan)
    with pytest.raises(routing.NoInstance):
        routing.pick(instances, "prefill")
    for inst in instances:
        for pod in inst.pods:
            pod.healthy = True
    inst, pod = routing.pick(instances, "prefill")
    assert pod.name == "p0"
    pod.outstanding = 1
    assert routing.pick(instances, "prefill")[1].name == "p1"
    pod.outstanding, pod.served = 0, 1
    assert routing.pick(instances, "prefill")[1].name == "p1"  # a tie goes to the one that served fewer
    d0 = instances[2].pods[0]
    d0.outstanding = 2
    assert routing.pick(instances, "decode")[1].name == "d1"


def test_a_server_beside_the_coordinator_does_not_take_port_1025(tmp_path):
    from simcluster.mindie import deploy

    cfg = userconfig.validate(user_config("j", p=(1, 1, 8), d=(1, 1, 8)))
    nodes = [placement.Node("only", "10.0.0.1", "A3", 16, tmp_path)]
    pods = [deploy._pod("j-coordinator-master-0", "mindie-ms-coordinator", "coordinator"), *deploy.server_pods(cfg)]
    deploy.schedule(cfg, pods, nodes, deploy_host="only")
    assert [(p["node"], p["port"], p["kv_port"]) for p in pods[1:]] == [("only", 1125, 21000), ("only", 1225, 22000)]
    assert pods[0]["node"] == "only" and pods[0]["port"] is None
