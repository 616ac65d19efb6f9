"""Parsing a topology from plain data / YAML: every bad field is reported by path; good input round-trips."""

from __future__ import annotations

import dataclasses

import pytest

from apps.deployments.topology import (
    ModelProfile,
    SpecError,
    spec_diff,
    spec_from_dict,
    spec_from_yaml,
    spec_to_dict,
    spec_to_yaml,
)


def errors_of(data) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    return dict(info.value.errors)


def test_reference_yaml_round_trips_through_dict_and_yaml(fixed_spec):
    assert spec_from_dict(spec_to_dict(fixed_spec)) == fixed_spec
    assert spec_from_yaml(spec_to_yaml(fixed_spec)) == fixed_spec


def test_defaults_fill_optional_fields(fixed_data):
    del fixed_data["instances"][1]["expert_parallel"]
    spec = spec_from_dict(fixed_data)
    p1 = spec.instance("p1")
    assert (p1.dp, p1.dp_style, p1.devices, p1.expert_parallel) == (1, "external", None, False)
    assert spec.transfer_ports.base == 20000 and spec.transfer_ports.per_device == 100


def test_wrong_type_names_the_index_and_the_value(fixed_data):
    fixed_data["instances"][2]["tp"] = "x"
    assert errors_of(fixed_data)["instances[2].tp"] == "expected a positive integer, got 'x'"


def test_bool_is_not_an_integer(fixed_data):
    fixed_data["instances"][0]["dp"] = True
    assert "instances[0].dp" in errors_of(fixed_data)


def test_every_error_is_reported_in_one_pass(fixed_data):
    fixed_data["instances"][0]["tp"] = 0
    fixed_data["instances"][3]["api_port"] = 70000
    fixed_data["proxy"]["policy"] = "random"
    errors = errors_of(fixed_data)
    assert errors["instances[0].tp"] == "expected a positive integer, got 0"
    assert errors["instances[3].api_port"] == "expected a port number 1-65535, got 70000"
    assert errors["proxy.policy"] == "expected one of round_robin, least_conn, consistent_hash, cache_aware, got 'random'"


def test_proxy_workers_is_auto_or_a_count(fixed_data):
    assert spec_from_dict(fixed_data).proxy.workers == "auto"
    fixed_data["proxy"]["workers"] = 4
    assert spec_from_dict(fixed_data).proxy.workers == 4
    assert spec_from_dict(spec_to_dict(spec_from_dict(fixed_data))).proxy.workers == 4
    for bad in (0, "many", 65, True):
        fixed_data["proxy"]["workers"] = bad
        assert errors_of(fixed_data)["proxy.workers"].startswith("expected auto or a whole number from 1 to 64"), bad


def test_kv_connector_is_pull_or_layerwise_and_kept_only_when_not_the_default(fixed_data):
    assert spec_from_dict(fixed_data).kv_connector == "pull"
    assert "kv_connector" not in spec_to_dict(spec_from_dict(fixed_data))  # stored specs read as before
    fixed_data["kv_connector"] = "layerwise"
    spec = spec_from_dict(fixed_data)
    assert spec.kv_connector == "layerwise" and spec_to_dict(spec)["kv_connector"] == "layerwise"
    assert spec_from_yaml(spec_to_yaml(spec)) == spec
    fixed_data["kv_connector"] = "push"
    assert errors_of(fixed_data)["kv_connector"] == ("expected pull (MooncakeConnectorV1) or layerwise "
                                                     "(MooncakeLayerwiseConnector), got 'push'")
    fixed_data["kv_connector"] = "MooncakeLayerwiseConnector"
    assert errors_of(fixed_data)["kv_connector"].endswith("got 'MooncakeLayerwiseConnector'; write layerwise for "
                                                          "MooncakeLayerwiseConnector")
    fixed_data["kv_connector"] = ["layerwise"]
    assert "kv_connector" in errors_of(fixed_data)


def test_unknown_and_missing_fields(fixed_data):
    fixed_data["instances"][1]["tensor_parallel"] = 8
    del fixed_data["instances"][1]["kv_port"]
    del fixed_data["model"]["served_name"]
    errors = errors_of(fixed_data)
    assert errors["instances[1].tensor_parallel"].startswith("unknown field; known fields: name, role, tp, api_port")
    assert errors["instances[1].kv_port"] == "missing required field"
    assert errors["model.served_name"] == "missing required field"


def test_not_a_mapping_at_top():
    assert errors_of(["a"]) == {"": "expected a mapping, got ['a']"}


def test_instances_must_be_a_list(fixed_data):
    fixed_data["instances"] = {"p0": {}}
    assert errors_of(fixed_data)["instances"].startswith("expected a list of instances")


@pytest.mark.parametrize("args, path, fragment", [
    (["--Enforce-Eager"], "extra_args[0]", "is not a flag name"),
    (["--seed=1024"], "extra_args[0]", "put its value in the next item"),
    (["1024"], "extra_args[0]", "does not follow a --flag"),
    (["--seed", "1", "2"], "extra_args[2]", "does not follow a --flag"),
    (["--seed", 1024], "extra_args[1]", "expected a string"),
    ("--enforce-eager", "extra_args", "expected a list"),
])
def test_extra_args_are_flag_value_pairs(fixed_data, args, path, fragment):
    fixed_data["instances"][0]["extra_args"] = args
    assert fragment in errors_of(fixed_data)[f"instances[0].{path}"]


def test_extra_args_accept_switches_and_hostile_values(fixed_data):
    fixed_data["instances"][0]["extra_args"] = ["--enforce-eager", "--seed", "$(reboot)", "--x", "-1"]
    assert spec_from_dict(fixed_data).instances[0].extra_args == ("--enforce-eager", "--seed", "$(reboot)", "--x", "-1")


@pytest.mark.parametrize("env, key, fragment", [
    ({"hccl_buffsize": "1"}, "env.hccl_buffsize", "expected an env name"),
    ({"A-B": "1"}, "env.A-B", "expected an env name"),
    ({"FLAG": True}, "env.FLAG", "expected a string"),
    ({"X": "a\0b"}, "env.X", "expected a string"),
])
def test_env_names_and_values(fixed_data, env, key, fragment):
    fixed_data["instances"][0]["env"] = env
    assert fragment in errors_of(fixed_data)[f"instances[0].{key}"]


def test_env_int_values_become_strings(fixed_data):
    fixed_data["instances"][0]["env"] = {"HCCL_BUFFSIZE": 512}
    assert dict(spec_from_dict(fixed_data).instances[0].env) == {"HCCL_BUFFSIZE": "512"}


def test_devices_must_be_non_negative_ints(fixed_data):
    fixed_data["instances"][0]["devices"] = [0, -1]
    assert errors_of(fixed_data)["instances[0].devices[1]"] == "expected an integer >= 0, got -1"


def test_instance_name_must_be_file_safe(fixed_data):
    fixed_data["instances"][0]["name"] = "../p0"
    assert "instances[0].name" in errors_of(fixed_data)


def test_run_dir_must_be_absolute(fixed_data):
    fixed_data["run_dir"] = "relative/dir"
    assert errors_of(fixed_data)["run_dir"] == "expected an absolute path, got 'relative/dir'"


def test_store_servers_are_checked(fixed_data):
    fixed_data["store"] = {"servers": [{"node": "node1", "port": 11211}, {"node": "node2"}]}
    assert errors_of(fixed_data)["store.servers[1].port"] == "missing required field"


def test_yaml_syntax_error_names_the_line():
    with pytest.raises(SpecError) as info:
        spec_from_yaml("model:\n  path: /m\ninstances: [\n  - {name: p0\nproxy: {node: proxy}\n")
    path, message = info.value.errors[0]
    assert path == "yaml"
    assert message.startswith("syntax error at line ")
    assert "line 5" in message or "line 4" in message


def test_empty_yaml_is_reported():
    with pytest.raises(SpecError, match="expected a mapping"):
        spec_from_yaml("")


def test_kv_bytes_per_token_mha_and_mla():
    qwen = ModelProfile(layers=94, kv_heads=4, head_dim=128, dtype="bfloat16", attention_heads=64)
    assert qwen.kv_bytes_per_token == 2 * 94 * 4 * 128 * 2 == 192512
    ds = ModelProfile(layers=61, kv_heads=1, head_dim=576, dtype="bfloat16", attention_heads=128, kv_layout="mla")
    assert ds.kv_bytes_per_token == 61 * 576 * 2


def test_diff_names_changed_fields_by_instance_name(fixed_spec):
    d1 = fixed_spec.instance("d1")
    changed = dataclasses.replace(fixed_spec, instances=(*fixed_spec.instances[:3], dataclasses.replace(d1, tp=2)),
                                  proxy=dataclasses.replace(fixed_spec.proxy, policy="round_robin"))
    assert spec_diff(fixed_spec, changed) == [("proxy.policy", "least_conn", "round_robin"),
                                              ("instances[d1].tp", 4, 2)]


def test_diff_shows_added_and_removed_instances_once(fixed_spec):
    p1 = fixed_spec.instance("p1")
    removed = dataclasses.replace(fixed_spec, instances=tuple(i for i in fixed_spec.instances if i.name != "p1"))
    diff = spec_diff(fixed_spec, removed)
    assert diff == [("instances[p1]", spec_to_dict(fixed_spec)["instances"][1], None)]
    assert spec_diff(removed, fixed_spec)[0][0] == "instances[p1]"
    assert spec_diff(removed, fixed_spec)[0][2]["name"] == p1.name


def test_diff_ignores_instance_order(fixed_spec):
    shuffled = dataclasses.replace(fixed_spec, instances=tuple(reversed(fixed_spec.instances)))
    assert spec_diff(fixed_spec, shuffled) == []


@pytest.mark.parametrize("value", ["-tp=1", "-dp", "-x"])
def test_an_extra_arg_value_cannot_smuggle_an_option(fixed_data, value):
    fixed_data["instances"][0]["extra_args"] = ["--seed", value]
    assert "looks like an option" in errors_of(fixed_data)["instances[0].extra_args[1]"]


@pytest.mark.parametrize("spelled", ["//var/lib/pdcp/ref", "/var/lib//pdcp/ref", "/var/lib/pdcp/./ref/.",
                                     "/var/lib/pdcp/ref/", "///var/lib/pdcp/ref//"])
def test_run_dir_is_stored_in_one_spelling(fixed_data, spelled):
    fixed_data["run_dir"] = spelled
    spec = spec_from_dict(fixed_data)
    assert spec.run_dir == "/var/lib/pdcp/ref"
    assert spec_to_dict(spec)["run_dir"] == "/var/lib/pdcp/ref"


@pytest.mark.parametrize("run_dir", ["/var/lib/pdcp/../../etc", "/var/lib/pdcp/ref/..", "/..", "/"])
def test_run_dir_with_dot_dot_or_no_directory_is_refused(fixed_data, run_dir):
    fixed_data["run_dir"] = run_dir
    assert "run_dir" in errors_of(fixed_data)


@pytest.mark.parametrize("profile, root", [("vllm-ascend", "/var/lib/pdcp"), ("sim", "/home/simnode/pdcp-runs")])
def test_omitted_run_dir_is_the_profiles_root_per_deployment(fixed_data, profile, root):
    del fixed_data["run_dir"]
    fixed_data["launch_profile"] = profile
    assert spec_from_dict(fixed_data).run_dir == root
    assert spec_from_dict(fixed_data, deployment_name="ref-1").run_dir == f"{root}/ref-1"
    assert spec_from_yaml(spec_to_yaml(spec_from_dict(fixed_data, deployment_name="x"))).run_dir == f"{root}/x"


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_default_run_dir_is_not_world_writable(fixed_data, profile):
    del fixed_data["run_dir"]
    fixed_data["launch_profile"] = profile
    run_dir = spec_from_dict(fixed_data, deployment_name="ref").run_dir
    assert not run_dir.startswith(("/tmp/", "/var/tmp/", "/dev/shm/"))


def test_new_fields_round_trip_through_yaml(fixed_data):
    from apps.deployments.topology import spec_to_yaml
    d0 = fixed_data["instances"][2]
    del d0["node"]
    d0.update(nodes=["node2", "node3"], engine_id="d-0",
              env={"LD_LIBRARY_PATH": {"prepend": "/opt/mooncake"}, "LD_PRELOAD": {"append": "/a.so", "separator": " "}})
    fixed_data["kv_pool"] = {"backend": "memcache", "node": "proxy", "install_path": "/usr/lib/python3/dist-packages",
                             "protocol": "device_rdma", "load_failure_policy": "recompute", "consumer_is_to_load": True}
    spec = spec_from_dict(fixed_data)
    assert spec.instances[2].span == ("node2", "node3") and spec.instances[2].node == "node2"
    assert spec_from_yaml(spec_to_yaml(spec)) == spec
    assert "nodes:" in spec_to_yaml(spec) and spec_to_yaml(spec).count("node: node2") == 0


def test_bad_new_fields_name_their_path(fixed_data):
    fixed_data["instances"][0]["nodes"] = ["node0"]
    fixed_data["instances"][1].pop("node")
    fixed_data["instances"][2]["env"] = {"LD_LIBRARY_PATH": {"prepend": "$HOME/lib"}, "X": {"middle": "/a"}}
    fixed_data["instances"][3]["engine_id"] = "a b"
    fixed_data["kv_pool"] = {"node": "proxy", "backend": "redis", "segment_size": "1.5GB", "protocol": "tcp"}
    errors = errors_of(fixed_data)
    assert errors["instances[0].nodes"].startswith("give either node")
    assert errors["instances[1].node"] == "missing required field"
    assert errors["instances[2].env.LD_LIBRARY_PATH.prepend"].startswith("a literal '$' would not expand here")
    assert errors["instances[2].env.X.middle"].startswith("unknown field")
    assert errors["instances[3].engine_id"].startswith("expected letters, digits")
    assert errors["kv_pool.backend"] == "expected one of mooncake, memcache, got 'redis'"
    assert errors["kv_pool.segment_size"].startswith("expected whole gigabytes")
    fixed_data["kv_pool"] = {"node": "proxy", "backend": "memcache", "protocol": "tcp"}
    assert errors_of(fixed_data)["kv_pool.protocol"].startswith("expected one of device_sdma, device_rdma")
    fixed_data["kv_pool"] = {"node": "proxy", "protocol": "device_sdma"}
    assert errors_of(fixed_data)["kv_pool.protocol"].startswith("only the memcache backend takes protocol")


def test_prefer_local_round_trips_and_only_mooncake_takes_it(fixed_data):
    from apps.deployments.topology import spec_to_dict
    fixed_data["kv_pool"]["prefer_local"] = False
    spec = spec_from_dict(fixed_data)
    assert spec_to_dict(spec)["kv_pool"]["prefer_local"] is False and spec_from_dict(spec_to_dict(spec)) == spec
    fixed_data["kv_pool"]["prefer_local"] = True
    assert "prefer_local" not in spec_to_dict(spec_from_dict(fixed_data))["kv_pool"]  # the guide's value stays implicit
    fixed_data["kv_pool"] = {"node": "proxy", "backend": "memcache", "prefer_local": False}
    assert errors_of(fixed_data)["kv_pool.prefer_local"].startswith("only the mooncake backend")


def test_proxy_kv_events_is_optional_and_round_trips(fixed_data):
    from apps.deployments.topology.spec import KvEventsSpec

    assert spec_from_dict(fixed_data).proxy.kv_events is None
    assert "kv_events" not in spec_to_dict(spec_from_dict(fixed_data))["proxy"]  # absent specs serialize as before
    fixed_data["proxy"]["kv_events"] = {}
    assert spec_from_dict(fixed_data).proxy.kv_events == KvEventsSpec(port=5557, replay_port=None)  # vLLM's default
    fixed_data["proxy"]["kv_events"] = {"port": 6557, "replay_port": 6600}
    spec = spec_from_dict(fixed_data)
    assert spec.proxy.kv_events == KvEventsSpec(port=6557, replay_port=6600)
    assert spec_to_dict(spec)["proxy"]["kv_events"] == {"port": 6557, "replay_port": 6600}
    assert spec_from_yaml(spec_to_yaml(spec)) == spec
    fixed_data["proxy"]["kv_events"] = {"port": 0, "replay_port": 0}  # ports the engines pick
    spec = spec_from_dict(fixed_data)
    assert spec.proxy.kv_events == KvEventsSpec(port=0, replay_port=0) and spec_from_yaml(spec_to_yaml(spec)) == spec


def test_proxy_kv_events_errors_name_the_field(fixed_data):
    fixed_data["proxy"]["kv_events"] = {"port": 70000, "replay": 5558}
    errors = errors_of(fixed_data)
    assert errors["proxy.kv_events.port"] == "expected a port number 0-65535, got 70000"  # 0: the engine picks
    assert errors["proxy.kv_events.replay"] == "unknown field; known fields: port, replay_port"
    fixed_data["proxy"]["kv_events"] = True
    assert errors_of(fixed_data)["proxy.kv_events"] == "expected a mapping, got True"
