"""One test per validation rule: the problem names the field path and suggests a concrete change."""

from __future__ import annotations

import dataclasses

import pytest

from apps.deployments.topology import (
    NodeFacts,
    Problem,
    TopologyInvalid,
    build_plan,
    spec_from_dict,
    validate_topology,
)


def problems(data, nodes) -> list[Problem]:
    return validate_topology(spec_from_dict(data), nodes)


def at(found: list[Problem], path: str) -> Problem:
    matches = [p for p in found if p.path == path]
    assert matches, f"no problem at {path}; got {[str(p) for p in found]}"
    return matches[0]


def test_fixed_reference_is_clean(fixed_spec, nodes):
    assert validate_topology(fixed_spec, nodes) == []


def test_design_node0_as_drawn_is_rejected_with_a_fitting_shape(drawn_data, nodes):
    problem = at(problems(drawn_data, nodes), "instances[0].dp")
    assert problem.message == "p0 on node0 needs TP16 x DP2 = 32 NPUs, node0 has 16 healthy"
    assert problem.suggestion == "use DP=1, or TP=8 x DP=2"


def test_drawn_reference_also_flags_the_mixed_prefill_dp(drawn_data, nodes):
    problem = at(problems(drawn_data, nodes), "instances[1].dp")
    assert "kv_connector_extra_config.prefill.dp_size" in problem.message
    assert problem.suggestion == "give every prefill instance the same dp: 2 on p1, or 1 on p0"


def test_build_plan_refuses_an_invalid_topology(drawn_data, nodes):
    with pytest.raises(TopologyInvalid) as info:
        build_plan(spec_from_dict(drawn_data), nodes)
    assert info.value.problems[0].path == "instances[0].dp"


def test_unhealthy_dies_shrink_what_fits(fixed_data, nodes):
    nodes["node2"] = dataclasses.replace(nodes["node2"], healthy_logical_ids=frozenset(range(14)))
    problem = at(problems(fixed_data, nodes), "instances[2].dp")
    assert problem.message == "d0 on node2 needs TP4 x DP4 = 16 NPUs, node2 has 14 healthy"
    assert problem.suggestion == "use DP=3, or TP=2 x DP=4"


def test_shortfall_suggests_a_node_with_room(fixed_data, nodes):
    nodes["node4"] = NodeFacts("node4", "127.0.10.7", frozenset(range(16)), 16)
    nodes["node1"] = dataclasses.replace(nodes["node1"], healthy_logical_ids=frozenset(range(15)))
    problem = at(problems(fixed_data, nodes), "instances[1].tp")
    assert problem.suggestion == "TP=8 x DP=1, or move it to node4"


def test_needs_a_prefill_and_a_decode(fixed_data, nodes):
    fixed_data["instances"] = [i for i in fixed_data["instances"] if i["role"] == "prefill"]
    problem = at(problems(fixed_data, nodes), "instances")
    assert "no decode instance" in problem.message
    assert problem.suggestion == "add an instance with role: decode (e.g. name: d0)"


def test_instance_names_are_unique(fixed_data, nodes):
    fixed_data["instances"][3]["name"] = "d0"
    assert at(problems(fixed_data, nodes), "instances[3].name").suggestion == "rename it, e.g. d0-3"


def test_instance_node_must_exist_and_have_npus(fixed_data, nodes):
    fixed_data["instances"][0]["node"] = "node9"
    fixed_data["instances"][1]["node"] = "proxy"
    found = problems(fixed_data, nodes)
    assert at(found, "instances[0].node").suggestion == "use one of: node0, node1, node2, node3"
    assert at(found, "instances[1].node").message == "p1: node proxy has no NPUs"


@pytest.mark.parametrize("path, section, key", [
    ("proxy.node", "proxy", "node"),
    ("kv_pool.node", "kv_pool", "node"),
    ("bench_client.node", "bench_client", "node"),
])
def test_service_nodes_must_exist(fixed_data, nodes, path, section, key):
    fixed_data[section][key] = "ghost"
    problem = at(problems(fixed_data, nodes), path)
    assert problem.message == "node 'ghost' is not in the cluster inventory"
    assert "node0" in problem.suggestion and "proxy" in problem.suggestion


def test_layerwise_takes_any_proxy_worker_count(fixed_data, nodes):
    fixed_data["kv_connector"] = "layerwise"
    assert problems(fixed_data, nodes) == []
    fixed_data["proxy"]["workers"] = 4  # the supervisor routes a Decode's metaserver call to its request's worker
    assert problems(fixed_data, nodes) == []


def with_sim_ring(data: dict) -> dict:
    """The simulated cluster's memcached ring standing in for a MemCache pool (the only place `store` is valid)."""
    data.update(launch_profile="sim", store={"replicas": 3, "servers": [
        {"node": "node1", "port": 11211}, {"node": "node2", "port": 11211}, {"node": "node3", "port": 11211}]})
    data["kv_pool"] = {"backend": "memcache", "node": "proxy", "install_path": "/usr/lib/python3/dist-packages",
                       "metrics_port": 9003}
    return data


def test_store_server_node_must_exist(fixed_data, nodes):
    with_sim_ring(fixed_data)["store"]["servers"][2]["node"] = "ghost"
    assert at(problems(fixed_data, nodes), "store.servers[2].node")


def test_plain_memcached_store_is_refused_on_real_nodes(fixed_data, nodes):
    with_sim_ring(fixed_data)
    assert problems(fixed_data, nodes) == []
    fixed_data["launch_profile"] = "vllm-ascend"
    assert "kv_pool.backend: memcache" in at(problems(fixed_data, nodes), "store").suggestion
    fixed_data.update(launch_profile="sim", kv_pool={"node": "proxy"})
    assert at(problems(fixed_data, nodes), "store").message.endswith("but kv_pool is backend mooncake")


def test_memcache_pool_needs_its_install_path(fixed_data, nodes):
    fixed_data["kv_pool"] = {"backend": "memcache", "node": "proxy"}
    assert "pip show memcache_hybrid" in at(problems(fixed_data, nodes), "kv_pool.install_path").suggestion


def test_engine_ids_must_differ(fixed_data, nodes):
    fixed_data["instances"][0]["engine_id"] = "0"
    fixed_data["instances"][2]["engine_id"] = "0"
    assert "Conflict engine id" in at(problems(fixed_data, nodes), "instances[2].engine_id").message


def test_spanning_instance_checks_every_node(fixed_data, nodes):
    fixed_data["instances"] = [i for i in fixed_data["instances"] if i["name"] != "d1"]
    d0 = fixed_data["instances"][2]
    del d0["node"]
    d0.update(nodes=["node2", "ghost"], dp=8)
    assert "not in the cluster inventory" in at(problems(fixed_data, nodes), "instances[2].nodes[1]").message
    d0.update(nodes=["node2", "node3"], dp=5)
    problem = at(problems(fixed_data, nodes), "instances[2].dp")
    assert problem.message == "d0: DP5 over 2 nodes does not split evenly (each node hosts the same number of DP ranks)"
    assert problem.suggestion.startswith("use DP=6 (3 per node)")
    d0.update(dp=10)  # 5 x TP4 = 20 dies per node: node3 is short too
    assert "needs TP4 x DP5 (DP10 over 2 nodes) = 20 NPUs" in at(problems(fixed_data, nodes), "instances[2].dp").message


def test_library_path_env_only_extends_with_absolute_paths(fixed_data, nodes):
    env = fixed_data["instances"][0]["env"] = {"LD_LIBRARY_PATH": "/opt/mooncake:$LD_LIBRARY_PATH"}
    assert "would replace the node's own value" in at(problems(fixed_data, nodes), "instances[0].env.LD_LIBRARY_PATH").message
    env["LD_LIBRARY_PATH"] = {"prepend": "/opt/mooncake:lib"}
    assert "'lib' is not an absolute path" in at(problems(fixed_data, nodes), "instances[0].env.LD_LIBRARY_PATH").message
    env["LD_LIBRARY_PATH"] = {"prepend": "/opt/mooncake"}
    assert problems(fixed_data, nodes) == []


def not_hbm(warnings) -> tuple[str, ...]:
    """The warnings beside the HBM fit's (tests/deployments/test_hbm_fit.py)."""
    return tuple(w for w in warnings if "HBM" not in w)


def test_literal_dollar_in_a_plain_value_is_a_warning_not_an_error(fixed_data, nodes):
    from apps.deployments.topology import build_plan
    fixed_data["instances"][0]["env"] = {"VLLM_LOGGING_LEVEL": "$LEVEL"}
    assert problems(fixed_data, nodes) == []
    fixed_data["kv_pool"]["load_failure_policy"] = "recompute"  # no pool warning: this test is about env
    (warning,) = not_hbm(build_plan(spec_from_dict(fixed_data), nodes).warnings)
    assert warning.startswith("instances[0].env.VLLM_LOGGING_LEVEL: p0: VLLM_LOGGING_LEVEL holds a literal '$'")


@pytest.mark.parametrize("pool, warned", [
    ({}, "kv_load_failure_policy fail, vLLM's default"),
    ({"load_failure_policy": "fail"}, "kv_load_failure_policy fail)"),
    ({"load_failure_policy": "recompute"}, None),
    ({"backend": "memcache", "install_path": "/usr/lib/python3/dist-packages"}, None),
])
def test_a_mooncake_pool_that_fails_loads_of_a_dead_engines_blocks_is_a_warning(fixed_data, nodes, pool, warned):
    from apps.deployments.topology import build_plan
    fixed_data["kv_pool"].update(pool)
    if pool.get("backend") == "memcache":
        del fixed_data["kv_pool"]["metrics_port"]
    assert problems(fixed_data, nodes) == []
    warnings = not_hbm(build_plan(spec_from_dict(fixed_data), nodes).warnings)
    if warned is None:
        assert warnings == ()
    else:
        (warning,) = warnings
        assert warning.startswith("kv_pool.load_failure_policy: when an engine stops without unmounting its pool "
                                  "segment (killed, crashed, restarted), the master lists its blocks for up to 120 s")
        assert warned in warning and warning.endswith("Fix: set kv_pool.load_failure_policy: recompute to compute "
                                                      "such a prefix again instead")


def test_explicit_devices_count_must_match(fixed_data, nodes):
    fixed_data["instances"][2]["devices"] = list(range(8))
    problem = at(problems(fixed_data, nodes), "instances[2].devices")
    assert problem.message == "d0 lists 8 devices but TP4 x DP4 needs 16"
    assert "list exactly 16 ids" in problem.suggestion


def test_explicit_devices_must_be_healthy(fixed_data, nodes):
    nodes["node2"] = dataclasses.replace(nodes["node2"], healthy_logical_ids=frozenset(range(16)) - {5})
    fixed_data["instances"][2].update(dp=1, devices=[4, 5, 6, 7])
    fixed_data["instances"][3].update(dp=1)
    problem = at(problems(fixed_data, nodes), "instances[2].devices")
    assert problem.message.startswith("d0: devices [5] are not healthy NPUs of node2")
    assert problem.suggestion == "replace [5] with free healthy ids [0]"


def test_device_sets_must_not_overlap(fixed_data, nodes):
    p0, p1 = fixed_data["instances"][:2]
    p0.update(tp=8, devices=list(range(8)))
    p1.update(tp=8, node="node0", devices=list(range(4, 12)), api_port=7200, kv_port=30100)
    problem = at(problems(fixed_data, nodes), "instances[1].devices")
    assert problem.message == "p1 and p0 on node0 both use NPUs [4, 5, 6, 7]"


def test_first_free_devices_skip_explicit_ones(fixed_data, nodes):
    from apps.deployments.topology.placement import assign_devices
    p0, p1 = fixed_data["instances"][:2]
    p0.update(tp=8)  # devices: null -> must avoid p1's explicit 0-7
    p1.update(tp=8, node="node0", devices=list(range(8)), api_port=7200, kv_port=30100)
    spec = spec_from_dict(fixed_data)
    assert validate_topology(spec, nodes) == []
    assert assign_devices(spec, nodes)["p0", "node0"] == tuple(range(8, 16))


@pytest.mark.parametrize("heads, tp, suggestion", [
    (64, 12, "use TP=16 (valid: 1, 2, 4, 8, 16, 32, 64)"),
    (40, 16, "use TP=8 (valid: 1, 2, 4, 8)"),
])
def test_tp_is_a_power_of_two_dividing_the_heads(fixed_data, nodes, heads, tp, suggestion):
    fixed_data["model"]["profile"] = {"layers": 94, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16",
                                     "attention_heads": heads}
    for inst in fixed_data["instances"][:2]:
        inst["tp"] = tp
        inst["devices"] = list(range(tp))
    problem = at(problems(fixed_data, nodes), "instances[0].tp")
    assert f"TP{tp} must be a power of two that divides the model's {heads} attention heads" in problem.message
    assert problem.suggestion == suggestion


def test_decode_tp_must_divide_prefill_tp(fixed_data, nodes):
    for inst in fixed_data["instances"]:
        inst.update(tp=4, dp=1) if inst["role"] == "prefill" else inst.update(tp=8, dp=2)
    problem = at(problems(fixed_data, nodes), "instances[2].tp")
    assert problem.message == "d0: decode TP8 must divide prefill p0's TP4 (P TP >= D TP and P TP % D TP == 0)"
    assert problem.suggestion == "use TP in [1, 2, 4] for d0, or raise p0's TP"


def test_one_size_per_role_for_extra_config(fixed_data, nodes):
    fixed_data["instances"][3]["tp"] = 2
    fixed_data["instances"][3]["dp"] = 8
    found = problems(fixed_data, nodes)
    assert "kv_connector_extra_config.decode.tp_size" in at(found, "instances[3].tp").message
    assert at(found, "instances[3].dp").suggestion == "give every decode instance the same dp: 4 on d1, or 8 on d0"


def test_kv_transfer_config_cannot_be_overridden(fixed_data, nodes):
    fixed_data["instances"][0]["extra_args"] = ["--kv-transfer-config", '{"kv_role":"kv_consumer"}']
    problem = at(problems(fixed_data, nodes), "instances[0].extra_args[0]")
    assert problem.message == "p0: --kv-transfer-config is rendered from the topology"
    assert "role, kv_port, tp, dp, engine_id and kv_pool" in problem.suggestion


def test_visible_devices_env_cannot_be_overridden(fixed_data, nodes):
    fixed_data["instances"][2]["env"] = {"ASCEND_RT_VISIBLE_DEVICES": "0"}
    assert at(problems(fixed_data, nodes), "instances[2].env.ASCEND_RT_VISIBLE_DEVICES").suggestion == \
        "remove it and set devices"


def test_dp_needs_an_rpc_port(fixed_data, nodes):
    del fixed_data["instances"][2]["dp_rpc_port"]
    assert at(problems(fixed_data, nodes), "instances[2].dp_rpc_port").suggestion == "set dp_rpc_port, e.g. 12321"


def test_store_replicas_fit_the_servers(fixed_data, nodes):
    with_sim_ring(fixed_data)["store"]["replicas"] = 4
    assert at(problems(fixed_data, nodes), "store.replicas").suggestion == "set replicas to at most 3, or add servers"


def test_consistent_hash_needs_a_key_and_only_it_takes_one(fixed_data, nodes):
    fixed_data["proxy"]["policy"] = "consistent_hash"
    assert at(problems(fixed_data, nodes), "proxy.hash_key").suggestion == "set hash_key: request_id (or client_ip)"
    fixed_data["proxy"].update(policy="round_robin", hash_key="client_ip")
    assert "policy: consistent_hash" in at(problems(fixed_data, nodes), "proxy.hash_key").suggestion


def test_proxy_port_colliding_with_an_api_port(fixed_data, nodes):
    fixed_data["proxy"]["node"] = "node0"
    fixed_data["proxy"]["port"] = 7100
    problem = at(problems(fixed_data, nodes), "proxy.port")
    assert problem.message == "proxy port 7100 on node0 (127.0.10.1) collides with p0 API port 7100"
    assert problem.suggestion == "set port to 7102"  # 7101 is the proxy's admin port (port + 1)


def test_store_port_colliding_with_pool_metrics(fixed_data, nodes):
    with_sim_ring(fixed_data)["store"]["servers"][0] = {"node": "proxy", "port": 9003}
    problem = at(problems(fixed_data, nodes), "store.servers[0].port")
    assert "collides with MemCache MetaService metrics port 9003" in problem.message
    assert problem.suggestion == "set port to 9004"


def test_rpc_port_colliding_with_an_api_port_of_the_same_instance(fixed_data, nodes):
    fixed_data["instances"][2]["dp_rpc_port"] = 7102
    problem = at(problems(fixed_data, nodes), "instances[2].dp_rpc_port")
    assert problem.message == "d0 DP rpc port 7102 on node2 (127.0.10.3) collides with d0 API ports 7100-7103"
    assert problem.suggestion == "set dp_rpc_port to 7104"


def test_kv_windows_must_not_overlap(fixed_data, nodes):
    p0, p1 = fixed_data["instances"][:2]
    p0.update(tp=8)
    p1.update(tp=8, node="node0", api_port=7200, kv_port=30004)
    problem = at(problems(fixed_data, nodes), "instances[1].kv_port")
    assert problem.message == ("p1 kv_port window 30004-30011 on node0 (127.0.10.1) collides with "
                               "p0 kv_port window 30000-30007")
    assert problem.suggestion == "set kv_port to 30008"


def test_kv_window_must_clear_mooncake_adxl_ports(fixed_data, nodes):
    fixed_data["instances"][2]["kv_port"] = 20500
    problem = at(problems(fixed_data, nodes), "instances[2].kv_port")
    assert problem.message == ("d0 kv_port window 20500-20515 on node2 overlaps Mooncake's ADXL transfer ports "
                               "20000-21599 (20000 + 16 dies x 100)")
    assert problem.suggestion == "set kv_port to 21600 (at or above 21600, clear of the ADXL range)"


def test_mooncake_v037_window_rejects_the_reference_ports(fixed_data, nodes):
    fixed_data["transfer_ports"] = {"per_device": 1000}
    problem = at(problems(fixed_data, nodes), "instances[0].kv_port")
    assert "ADXL transfer ports 20000-35999" in problem.message
    assert problem.suggestion.startswith("set kv_port to 36000")


def test_ascend_base_port_env_moves_the_adxl_range(fixed_data, nodes):
    fixed_data["instances"][2]["env"] = {"ASCEND_BASE_PORT": "30000"}
    problem = at(problems(fixed_data, nodes), "instances[2].kv_port")
    assert "ADXL transfer ports 30000-31599" in problem.message


def test_kv_window_must_end_below_65536(fixed_data, nodes):
    fixed_data["instances"][0]["kv_port"] = 65530
    problem = at(problems(fixed_data, nodes), "instances[0].kv_port")
    assert problem.message == "p0 kv_port window 65530-65545 runs past port 65535"
    assert problem.suggestion == "set kv_port to at most 65520"


def test_same_ports_on_different_nodes_are_fine(fixed_spec, nodes):
    # both P use 7100/30000 and both D 7100-7103/30200 - on different addresses, so no clash
    assert {i.kv_port for i in fixed_spec.instances} == {30000, 30200}
    assert validate_topology(fixed_spec, nodes) == []


def test_an_abbreviated_owned_flag_is_refused(fixed_data, nodes):
    from apps.deployments.topology import spec_from_dict, validate_topology

    fixed_data["instances"][0]["extra_args"] = ["--tensor-parallel", "8"]
    problems = validate_topology(spec_from_dict(fixed_data), nodes)
    assert any(p.path == "instances[0].extra_args[0]" and "rendered from the topology" in p.message
               for p in problems)


def test_proxy_admin_port_is_port_plus_one_unless_set(fixed_data):
    assert spec_from_dict(fixed_data).proxy.admin_port == 2000
    fixed_data["proxy"]["admin_port"] = 2500
    assert spec_from_dict(fixed_data).proxy.admin_port == 2500


def test_proxy_admin_port_colliding_with_the_proxy_port(fixed_data, nodes):
    fixed_data["proxy"]["admin_port"] = 1999
    problem = at(problems(fixed_data, nodes), "proxy.admin_port")
    assert "proxy admin port 1999" in problem.message and "collides with proxy port 1999" in problem.message
    assert problem.suggestion == "set admin_port to 2000"


def test_proxy_admin_port_colliding_with_pool_metrics_on_the_same_node(fixed_data, nodes):
    fixed_data["proxy"]["admin_port"] = 9003
    problem = at(problems(fixed_data, nodes), "proxy.admin_port")
    assert "mooncake_master metrics port 9003" in problem.message


def test_proxy_admin_port_past_65535(fixed_data, nodes):
    fixed_data["proxy"]["port"] = 65535
    problem = at(problems(fixed_data, nodes), "proxy.admin_port")
    assert "runs past port 65535" in problem.message


def kv_events_data(data, **events):
    """cache_aware with the exact view; the reference's Prefills drop --no-enable-prefix-caching (no cache, no events)."""
    data["proxy"].update(policy="cache_aware", kv_events=events or {"port": 5557, "replay_port": 5558})
    for inst in data["instances"]:
        if "--no-enable-prefix-caching" in inst["extra_args"]:
            inst["extra_args"].remove("--no-enable-prefix-caching")
    return data


def test_kv_events_is_clean_with_cache_aware_and_prefix_caching(fixed_data, nodes):
    assert problems(kv_events_data(fixed_data), nodes) == []


def test_kv_events_needs_cache_aware(fixed_data, nodes):
    kv_events_data(fixed_data)["proxy"]["policy"] = "least_conn"
    problem = at(problems(fixed_data, nodes), "proxy.kv_events")
    assert problem.message == "kv_events feeds cache_aware's exact view, policy is least_conn"
    assert problem.suggestion == "remove kv_events, or set policy: cache_aware"


def test_kv_events_needs_the_prefills_prefix_cache(fixed_data, nodes):
    kv_events_data(fixed_data)["instances"][1]["extra_args"].append("--no-enable-prefix-caching")
    problem = at(problems(fixed_data, nodes), "instances[1].extra_args")
    assert "p1 runs with --no-enable-prefix-caching" in problem.message
    assert problem.suggestion == "remove --no-enable-prefix-caching from its extra_args, or remove proxy.kv_events"


def test_kv_events_ports_count_every_dp_rank_on_the_node(fixed_data, nodes):
    """Each DP rank publishes on port + its global rank (and replays likewise): with DP2 on node0, 5557-5558 and
    a replay port of 5558 collide, and an API port inside the window does too."""
    kv_events_data(fixed_data)
    for inst in fixed_data["instances"][:2]:
        inst.update(tp=8, dp=2, dp_rpc_port=12321)
    problem = at(problems(fixed_data, nodes), "proxy.kv_events.replay_port")
    assert problem.message == ("p0 KV events replay ports 5558-5559 on node0 (127.0.10.1) collides with "
                               "p0 KV events ports 5557-5558")
    assert problem.suggestion == "set replay_port to 5559"
    fixed_data["proxy"]["kv_events"] = {"port": 7101}
    problem = at(problems(fixed_data, nodes), "proxy.kv_events.port")
    assert problem.message == "p0 KV events ports 7101-7102 on node0 (127.0.10.1) collides with p0 API ports 7100-7101"
    assert problem.suggestion == "set port to 7102"


def test_two_prefills_on_one_node_cannot_share_the_kv_events_port(fixed_data, nodes):
    kv_events_data(fixed_data)
    fixed_data["instances"][0]["tp"] = fixed_data["instances"][1]["tp"] = 8
    fixed_data["instances"][1].update(node="node0", api_port=7101, kv_port=30100)
    problem = at(problems(fixed_data, nodes), "proxy.kv_events.port")
    assert problem.message == "p1 KV events port 5557 on node0 (127.0.10.1) collides with p0 KV events port 5557"
    assert problem.suggestion.startswith("put p0 and p1 on different nodes")
