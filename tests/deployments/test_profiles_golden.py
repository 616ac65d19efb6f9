"""What the launch profiles render for the fixed reference topology, pinned byte for byte.

The golden files under golden/ are the reviewed output. After an intended change, regenerate them with
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest -p no:django tests/deployments/test_profiles_golden.py
and review the diff like code: it is the command line real nodes will run.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from apps.deployments.topology import build_plan, plan_to_text, spec_from_dict, validate_topology

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 once and review it"
    assert text == path.read_text(), f"{name} changed; if intended, regenerate with UPDATE_GOLDEN=1 and review"


def _env_value(value):
    return value if isinstance(value, str) else dataclasses.asdict(value)


def plan_as_json(plan) -> str:
    rows = [{"stage": stage.name, "key": p.key, "role": p.role, "instance": p.instance, "node": p.node,
             "dp_rank": p.dp_rank, "argv": list(p.launch.argv),
             "env": {k: _env_value(v) for k, v in p.launch.env.items()},
             "files": [{"path": str(f.path), "mode": oct(f.mode), "content": f.content} for f in p.launch.files],
             "workdir": str(p.launch.workdir), "log_file": str(p.launch.log_file),
             "pid_file": str(p.launch.pid_file), "health_url": p.health_url, "ports": list(p.ports),
             "kv_port_window": p.kv_port_window}
            for stage in plan.stages for p in stage.processes]
    return json.dumps(rows, indent=1) + "\n"


@pytest.fixture
def vllm_plan(fixed_spec, nodes):
    return build_plan(fixed_spec, nodes)


@pytest.fixture
def sim_plan(fixed_spec, nodes):
    return build_plan(dataclasses.replace(fixed_spec, launch_profile="sim"), nodes)


def test_vllm_ascend_reference_structured_golden(vllm_plan):
    check_golden("reference-vllm-ascend.json", plan_as_json(vllm_plan))


def test_vllm_ascend_reference_plan_text_golden(vllm_plan):
    check_golden("reference-vllm-ascend.txt", plan_to_text(vllm_plan))


def test_sim_reference_golden(sim_plan):
    check_golden("reference-sim.json", plan_as_json(sim_plan))


def test_stages_run_pool_then_engines_then_proxy(vllm_plan):
    assert [s.name for s in vllm_plan.stages] == ["kv_pool", "engines", "proxy"]
    keys = [p.key for p in vllm_plan.processes]
    assert len(keys) == len(set(keys)) == 12  # pool + (1 + 1 + 4 + 4) engines + proxy


def test_prefill_command_matches_the_reference_shape(vllm_plan):
    p0 = next(p for p in vllm_plan.processes if p.key == "p0-dp0")
    argv = p0.launch.argv
    assert argv[:7] == ("vllm", "serve", "/models/Qwen3-235B-A22B", "--host", "127.0.10.1", "--port", "7100")
    assert "--data-parallel-size" not in argv  # DP1: no DP group to coordinate
    assert argv[argv.index("--tensor-parallel-size") + 1] == "16"
    assert "--enable-expert-parallel" in argv
    kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    p2p = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": "30000",
           "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 16}, "decode": {"dp_size": 4, "tp_size": 4}}}
    pool = {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
            "kv_connector_extra_config": {"backend": "mooncake", "lookup_rpc_port": "0"}}
    assert kv == {"kv_connector": "MultiConnector", "kv_role": "kv_producer",
                  "kv_connector_extra_config": {"connectors": [p2p, pool]}}
    env = p0.launch.env
    assert env["PYTHONHASHSEED"] == "0" and env["MOONCAKE_CONFIG_PATH"] == "/var/lib/pdcp/reference/config/mooncake.json"
    assert "MOONCAKE_MASTER" not in env  # it would override the file
    (config,) = p0.launch.files
    assert json.loads(config.content)["master_server_address"] == "127.0.10.5:50088" and config.mode == 0o600
    assert env["HCCL_IF_IP"] == "127.0.10.1" and env["HCCL_BUFFSIZE"] == "256"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == env["HCCL_SOCKET_IFNAME"] == "eth0"
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(map(str, range(16)))


def test_external_dp_decode_gets_one_process_per_rank(vllm_plan):
    d0 = [p for p in vllm_plan.processes if p.instance == "d0"]
    assert [p.key for p in d0] == ["d0-dp0", "d0-dp1", "d0-dp2", "d0-dp3"]
    assert [p.launch.env["ASCEND_RT_VISIBLE_DEVICES"] for p in d0] == ["0,1,2,3", "4,5,6,7", "8,9,10,11",
                                                                      "12,13,14,15"]
    assert [p.ports[0] for p in d0] == [7100, 7101, 7102, 7103]
    assert [p.kv_port_window for p in d0] == [(30200, 30203), (30204, 30207), (30208, 30211), (30212, 30215)]
    argv = d0[2].launch.argv
    dp_flags = argv[argv.index("--data-parallel-size"):argv.index("--tensor-parallel-size")]
    assert dp_flags == ("--data-parallel-size", "4", "--data-parallel-rank", "2", "--data-parallel-address",
                        "127.0.10.3", "--data-parallel-rpc-port", "12321")
    assert all(p.launch.env["HCCL_BUFFSIZE"] == "600" for p in d0)


def test_kv_role_follows_the_instance_role_and_engine_id_is_never_set(vllm_plan):
    lookup = {}
    for p in vllm_plan.processes:
        if p.role in ("prefill", "decode"):
            argv = p.launch.argv
            kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
            role = {"prefill": "kv_producer", "decode": "kv_consumer"}[p.role]
            assert kv["kv_role"] == role
            assert [c["kv_role"] for c in kv["kv_connector_extra_config"]["connectors"]] == [role, role]
            assert "engine_id" not in kv
            lookup.setdefault(p.instance, set()).add(
                kv["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"]["lookup_rpc_port"])
    assert lookup == {"p0": {"0"}, "p1": {"1"}, "d0": {"2"}, "d1": {"3"}}  # one per instance, unique


def test_engine_id_and_failure_policy_go_on_the_multiconnector(fixed_data, nodes):
    fixed_data["instances"][0]["engine_id"] = "0"
    fixed_data["kv_pool"].update(load_failure_policy="recompute", consumer_is_to_load=True)
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    kv = {p.key: json.loads(p.launch.argv[p.launch.argv.index("--kv-transfer-config") + 1])
          for p in plan.processes if p.role in ("prefill", "decode")}
    assert kv["p0-dp0"]["engine_id"] == "0" and "engine_id" not in kv["p1-dp0"]
    assert kv["d0-dp0"]["kv_load_failure_policy"] == "recompute"
    children = kv["d0-dp0"]["kv_connector_extra_config"]["connectors"]
    assert all("kv_load_failure_policy" not in c for c in children)
    assert children[1]["kv_connector_extra_config"]["consumer_is_to_load"] is True


def test_internal_dp_is_one_process_with_local_size(fixed_data, nodes):
    for inst in fixed_data["instances"]:
        if inst["role"] == "decode":
            inst["dp_style"] = "internal"
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    d1 = [p for p in plan.processes if p.instance == "d1"]
    assert len(d1) == 1 and d1[0].key == "d1" and "--headless" not in d1[0].launch.argv
    argv = d1[0].launch.argv
    assert argv[argv.index("--data-parallel-size"):argv.index("--tensor-parallel-size")] == (
        "--data-parallel-size", "4", "--data-parallel-size-local", "4", "--data-parallel-start-rank", "0",
        "--data-parallel-address", "127.0.10.4", "--data-parallel-rpc-port", "12321")
    assert d1[0].launch.env["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(map(str, range(16)))
    assert d1[0].ports == (7100, 12321) and d1[0].kv_port_window == (30200, 30215)
    proxy = plan.stages[-1].processes[0].launch.argv
    assert proxy[proxy.index("--decode") + 1:proxy.index("--policy")] == ("127.0.10.3:7100", "127.0.10.4:7100")


def test_external_dp_spanning_two_nodes_starts_each_nodes_ranks_there(fixed_data, nodes):
    # docs/ascend-pd-launch-facts.md §1.3: D nodes 3+4 are ONE D instance, DP master on the first.
    fixed_data["instances"] = [i for i in fixed_data["instances"] if i["name"] != "d1"]
    d0 = next(i for i in fixed_data["instances"] if i["name"] == "d0")
    del d0["node"]
    d0.update(nodes=["node2", "node3"], dp=8)
    fixed_data["instances"][1]["dp"] = 1
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    d0 = [p for p in plan.processes if p.instance == "d0"]
    assert [(p.key, p.node, p.ports[0]) for p in d0[3:5]] == [("d0-dp3", "node2", 7103), ("d0-dp4", "node3", 7100)]
    assert [p.launch.env["ASCEND_RT_VISIBLE_DEVICES"] for p in d0[3:5]] == ["12,13,14,15", "0,1,2,3"]
    assert d0[4].launch.env["HCCL_IF_IP"] == "127.0.10.4"
    argv = d0[4].launch.argv
    assert argv[argv.index("--data-parallel-size"):argv.index("--tensor-parallel-size")] == (
        "--data-parallel-size", "8", "--data-parallel-rank", "4", "--data-parallel-address", "127.0.10.3",
        "--data-parallel-rpc-port", "12321")
    assert d0[4].kv_port_window == (30216, 30219)  # global rank 4: kv_port + 4 * TP4
    assert d0[0].ports == (7100, 12321) and d0[4].ports == (7100,)  # only the DP master binds the rpc port
    proxy = plan.stages[-1].processes[0].launch.argv
    assert len(proxy[proxy.index("--decode") + 1:proxy.index("--policy")]) == 8


def test_internal_dp_spanning_nodes_runs_headless_secondaries(fixed_data, nodes):
    fixed_data["instances"] = [i for i in fixed_data["instances"] if i["name"] != "d1"]
    d0 = next(i for i in fixed_data["instances"] if i["name"] == "d0")
    del d0["node"]
    d0.update(nodes=["node2", "node3"], dp=8, dp_style="internal")
    fixed_data["instances"][1]["dp"] = 1
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    master, second = [p for p in plan.processes if p.instance == "d0"]
    assert (master.key, second.key, second.node) == ("d0", "d0-n1", "node3")
    argv = second.launch.argv
    assert "--port" not in argv and "--headless" in argv
    assert argv[argv.index("--data-parallel-size"):argv.index("--tensor-parallel-size")] == (
        "--data-parallel-size", "8", "--data-parallel-size-local", "4", "--data-parallel-start-rank", "4",
        "--data-parallel-address", "127.0.10.3", "--data-parallel-rpc-port", "12321")
    assert second.health_url is None and second.ports == () and second.kv_port_window == (30216, 30231)
    proxy = plan.stages[-1].processes[0].launch.argv
    assert proxy[proxy.index("--decode") + 1:proxy.index("--policy")] == ("127.0.10.3:7100",)


def test_proxy_lists_every_api_server(vllm_plan):
    argv = vllm_plan.stages[-1].processes[0].launch.argv
    assert argv[:7] == ("python", "-m", "pdproxy", "--host", "127.0.10.5", "--port", "1999")
    assert argv[argv.index("--prefill") + 1:argv.index("--decode")] == ("127.0.10.1:7100", "127.0.10.2:7100")
    decode = argv[argv.index("--decode") + 1:argv.index("--policy")]
    assert len(decode) == 8 and decode[0] == "127.0.10.3:7100" and decode[-1] == "127.0.10.4:7103"
    assert argv[-10:] == ("--policy", "least_conn", "--workers", "auto", "--admin-host", "127.0.0.1", "--admin-port", "2000",
                         "--admin-token-file", "/var/lib/pdcp/reference/secrets/proxy-admin.token")


def test_sim_binds_node_addresses_and_loopback_master(sim_plan):
    by_key = {p.key: p for p in sim_plan.processes}
    assert by_key["d1-dp3"].launch.argv[3:5] == ("--host", "127.0.10.4")
    pool = by_key["kv-pool"].launch.argv
    assert pool[pool.index("--rpc_address") + 1] == pool[pool.index("--metrics_host") + 1] == "127.0.10.5"
    assert by_key["proxy"].launch.argv[:3] == ("pdproxy", "--host", "127.0.10.5")
    assert all("0.0.0.0" not in p.launch.argv for p in sim_plan.processes)


def test_sim_renders_the_real_engines_commands_env_and_files(vllm_plan, sim_plan):
    real = {p.key: p for p in vllm_plan.processes}
    for p in sim_plan.processes:
        if p.role in ("prefill", "decode"):
            assert p.launch.argv == real[p.key].launch.argv and p.launch.env == real[p.key].launch.env, p.key
            assert p.launch.files == real[p.key].launch.files, p.key


def test_sim_memcache_pool_is_a_memcached_ring_named_in_mmc_local_conf(fixed_data, nodes):
    fixed_data.update(launch_profile="sim", store={"replicas": 2, "servers": [
        {"node": "node1", "port": 11211}, {"node": "node2", "port": 11211}]})
    fixed_data["kv_pool"] = {"backend": "memcache", "node": "proxy", "install_path": "/usr/lib/python3/dist-packages"}
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    by_key = {p.key: p for p in plan.processes}
    assert by_key["store-1"].launch.argv == ("memcached", "-l", "127.0.10.3", "-p", "11211", "-U", "0", "-m", "64",
                                             "-P", "/var/lib/pdcp/reference/pids/store-1.pid")
    assert "-d" not in by_key["store-1"].launch.argv and "kv-pool" not in by_key
    p0 = by_key["p0-dp0"]
    (conf,) = p0.launch.files
    assert conf.path.name == "mmc-local.conf"
    lines = dict(line.split(" = ") for line in conf.content.splitlines())
    assert lines["ock.mmc.meta_service_url"] == "tcp://127.0.10.5:5000"
    assert lines["simcluster.ring"] == "127.0.10.2:11211,127.0.10.3:11211" and lines["simcluster.replicas"] == "2"
    assert p0.launch.env["LD_LIBRARY_PATH"].prepend == "/usr/lib/python3/dist-packages/memcache_hybrid/lib"
    real = build_plan(dataclasses.replace(spec_from_dict(fixed_data), launch_profile="vllm-ascend", store=None), nodes)
    meta = {p.key: p for p in real.processes}["kv-pool"]
    assert meta.launch.argv[:2] == ("python3", "-c") and meta.launch.files[0].path.name == "mmc-meta.conf"
    assert not any(p.launch.argv[0] == "memcached" for p in real.processes)


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_every_listener_binds_its_nodes_address_never_the_wildcard(fixed_spec, nodes, profile):
    plan = build_plan(dataclasses.replace(fixed_spec, launch_profile=profile), nodes)
    by_key = {p.key: p for p in plan.processes}
    for p in plan.processes:
        assert "0.0.0.0" not in p.launch.argv and "::" not in p.launch.argv, p.key
        argv = p.launch.argv
        if p.role in ("prefill", "decode", "proxy"):
            assert argv[argv.index("--host") + 1] == p.address, p.key
    pool = by_key["kv-pool"].launch.argv
    assert pool[pool.index("--rpc_address") + 1] == pool[pool.index("--metrics_host") + 1] == "127.0.10.5"


@pytest.mark.parametrize("profile, admin_host", [("vllm-ascend", "127.0.0.1"), ("sim", "127.0.10.5")])
def test_the_proxy_admin_api_has_its_own_listener_on_the_proxy_node(fixed_data, nodes, profile, admin_host):
    # On the sim, every node shares this machine's 127.0.0.1: the node's own loopback address stands in for it.
    fixed_data["launch_profile"] = profile
    fixed_data["proxy"]["admin_port"] = 2100
    proxy = build_plan(spec_from_dict(fixed_data), nodes).stages[-1].processes[0]
    argv = proxy.launch.argv
    assert argv[argv.index("--admin-host") + 1] == admin_host
    assert argv[argv.index("--admin-port") + 1] == "2100"
    assert proxy.ports == (1999, 2100)


def test_consistent_hash_passes_its_key(fixed_data, nodes):
    fixed_data["proxy"].update(policy="consistent_hash", hash_key="client_ip")
    argv = build_plan(spec_from_dict(fixed_data), nodes).stages[-1].processes[0].launch.argv
    assert argv[argv.index("--policy"):argv.index("--policy") + 4] == ("--policy", "consistent_hash", "--hash-key",
                                                                       "client_ip")


def test_instance_env_overrides_defaults(fixed_data, nodes):
    fixed_data["instances"][0]["env"] = {"HCCL_BUFFSIZE": "1024", "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": "600"}
    p0 = build_plan(spec_from_dict(fixed_data), nodes).stages[1].processes[0]
    assert p0.launch.env["HCCL_BUFFSIZE"] == "1024"
    assert p0.launch.env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] == "600"


def test_prefer_local_false_lets_another_prefill_load_a_dead_ones_blocks(fixed_data, nodes):
    fixed_data["kv_pool"]["prefer_local"] = False
    p0 = next(p for p in build_plan(spec_from_dict(fixed_data), nodes).processes if p.key == "p0-dp0")
    assert json.loads(p0.launch.files[0].content)["prefer_alloc_in_same_node"] is False


@pytest.mark.parametrize("policy", ["round_robin", "least_conn", "cache_aware"])
def test_the_proxy_policy_renders_flags_pdproxy_itself_accepts(fixed_data, nodes, policy):
    """cache_aware routes the Prefill by its prefix cache and the Decode by load; pdproxy's own parser reads the
    rendered command back to the same policies."""
    from pdproxy.cli import config_from_args

    fixed_data["proxy"]["policy"] = policy
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    argv = next(p for p in plan.processes if p.role == "proxy").launch.argv
    args = list(argv[argv.index("--host"):argv.index("--admin-token-file")])
    cfg = config_from_args(args)
    expected = ("cache_aware", "least_conn") if policy == "cache_aware" else (policy, policy)
    assert (cfg.role_policy("prefill"), cfg.role_policy("decode")) == expected


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_kv_connector_layerwise_renders_the_connector_and_the_proxys_layerwise_flow(fixed_data, nodes, profile):
    """Every engine's kv-transfer-config names MooncakeLayerwiseConnector (inside the pool's MultiConnector too), the
    simulated engine reads it as that connector, and the proxy's command parses back to --pd-flow layerwise with the
    node's address (what the Decodes call back); the default stays MooncakeConnectorV1 and the pull flow."""
    from pdproxy.cli import config_from_args
    from simcluster.engine import kvconfig

    def rendered(data):
        plan = build_plan(spec_from_dict(data), nodes)
        configs = [json.loads(p.launch.argv[p.launch.argv.index("--kv-transfer-config") + 1])
                   for p in plan.processes if p.role in ("prefill", "decode")]
        argv = next(p for p in plan.processes if p.role == "proxy").launch.argv
        return configs, config_from_args(list(argv[argv.index("--host"):argv.index("--admin-token-file")]))

    fixed_data["launch_profile"] = profile
    configs, proxy = rendered(fixed_data)
    assert {kvconfig.plan(c).kv_connector for c in configs} == {"MooncakeConnectorV1"} and proxy.pd_flow == "pull"
    fixed_data["kv_connector"] = "layerwise"
    configs, proxy = rendered(fixed_data)
    assert len(configs) == 10
    for config in configs:
        children = config["kv_connector_extra_config"]["connectors"]  # the reference has a KV pool
        assert [c["kv_connector"] for c in children] == ["MooncakeLayerwiseConnector", "AscendStoreConnector"]
        assert kvconfig.plan(config).kv_connector == "MooncakeLayerwiseConnector"
    assert (proxy.pd_flow, proxy.host, proxy.advertise_host) == ("layerwise", "127.0.10.5", None)
    assert proxy.workers == 1


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_layerwise_names_every_node_of_a_decode_whose_dp_ranks_span_nodes(fixed_data, nodes, profile):
    """Internal DP over two nodes: the headless node's ranks call the proxy's metaserver from, and name as
    remote_host, their own node, so the proxy is told both nodes of that Decode (--decode-hosts), which pdproxy's own
    parser accepts. A Decode on one node (every external-DP rank is its own API server) needs no entry, nor does the
    pull flow."""
    from pdproxy.cli import config_from_args
    from pdproxy.config import parse_decode_hosts

    def proxy_argv(data):
        plan = build_plan(spec_from_dict(data), nodes)
        return next(p for p in plan.processes if p.role == "proxy").launch.argv

    fixed_data.update(launch_profile=profile, kv_connector="layerwise")
    assert "--decode-hosts" not in proxy_argv(fixed_data)  # the reference: external DP, one node per rank
    fixed_data["instances"] = [i for i in fixed_data["instances"] if i["name"] != "d1"]
    d0 = next(i for i in fixed_data["instances"] if i["name"] == "d0")
    del d0["node"]
    d0.update(nodes=["node2", "node3"], dp=8, dp_style="internal")
    fixed_data["instances"][1]["dp"] = 1
    argv = proxy_argv(fixed_data)
    assert argv[argv.index("--pd-flow"):argv.index("--workers")] == (
        "--pd-flow", "layerwise", "--decode-hosts", "127.0.10.3:7100=127.0.10.3,127.0.10.4")
    cfg = config_from_args(list(argv[argv.index("--host"):argv.index("--admin-token-file")]))
    assert cfg.decode == ["127.0.10.3:7100"]
    assert parse_decode_hosts(cfg.decode_hosts, cfg.decode) == {"127.0.10.3:7100": ("127.0.10.3", "127.0.10.4")}
    fixed_data["kv_connector"] = "pull"
    assert "--decode-hosts" not in proxy_argv(fixed_data)


@pytest.mark.parametrize("profile, tokenizer", [("vllm-ascend", "/models/Qwen3-235B-A22B"),
                                                ("sim", "/opt/pdcp-aisbench/sim-tokenizer")])
def test_kv_events_render_each_prefills_publishers_and_the_proxys_subscriptions(fixed_data, nodes, profile,
                                                                                 tokenizer, tmp_path):
    """proxy.kv_events: every Prefill process publishes on a wildcard endpoint (the simulated engine parses it as
    vLLM's KVEventsConfig), no Decode does, and the proxy subscribes each --prefill API server to its ranks' node
    address at port + global DP rank, with the tokenizer pdproxy's own parser accepts."""
    from pdproxy.cli import config_from_args
    from pdproxy.kv_index import Endpoint, parse_specs
    from simcluster.engine.kv_events import parse_config

    fixed_data["launch_profile"] = profile
    fixed_data["proxy"].update(policy="cache_aware", kv_events={"port": 5557, "replay_port": 5600})
    p0 = fixed_data["instances"][0]
    p0.update(tp=8, dp=2, dp_style="internal", dp_rpc_port=12321, nodes=["node0", "node1"])
    p0["extra_args"].remove("--no-enable-prefix-caching")
    del p0["node"], fixed_data["instances"][1]  # p1 (node1) out: one Prefill size (validation)
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    configs = {p.key: p.launch.argv[p.launch.argv.index("--kv-events-config") + 1]
               for p in plan.processes if "--kv-events-config" in p.launch.argv}
    assert configs == dict.fromkeys(["p0", "p0-n1"], '{"enable_kv_cache_events":true,"publisher":"zmq",'
                                    '"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5600"}')
    sim = parse_config(configs["p0"])
    assert (sim.endpoint, sim.replay_endpoint, sim.publisher) == ("tcp://*:5557", "tcp://*:5600", "zmq")
    argv = next(p for p in plan.processes if p.role == "proxy").launch.argv
    assert argv[argv.index("--kv-events"):argv.index("--workers")] == (
        "--kv-events", "127.0.10.1:7100=tcp://127.0.10.1:5557|tcp://127.0.10.1:5600,"
        "tcp://127.0.10.2:5558|tcp://127.0.10.2:5601", "--tokenizer", tokenizer)
    (tmp_path / "tokenizer.json").write_text("{}")  # pdproxy checks the directory holds one (not there here)
    cfg = config_from_args([*argv[argv.index("--host"):argv.index("--tokenizer")], "--tokenizer", str(tmp_path)])
    assert parse_specs(cfg.kv_events)[0] == {"127.0.10.1:7100": [
        Endpoint("tcp://127.0.10.1:5557", "tcp://127.0.10.1:5600"), Endpoint("tcp://127.0.10.2:5558", "tcp://127.0.10.2:5601")]}
    assert cfg.prefill == ["127.0.10.1:7100"]


@pytest.mark.parametrize("profile", ["vllm-ascend", "sim"])
def test_kv_events_on_port_0_let_each_engine_pick_and_the_proxy_ask(fixed_data, nodes, profile, tmp_path):
    """port 0: every Prefill publishes on tcp://*:0 (its node's address, a port of its choosing; nothing to plan or
    clash) and the proxy asks each --prefill API server at GET /kv_event_sources."""
    from pdproxy.cli import config_from_args
    from pdproxy.kv_index import DISCOVER, parse_specs
    from simcluster.engine.kv_events import parse_config

    fixed_data["launch_profile"] = profile
    fixed_data["proxy"].update(policy="cache_aware", kv_events={"port": 0, "replay_port": 0})
    for inst in fixed_data["instances"]:
        if "--no-enable-prefix-caching" in inst.get("extra_args", []):
            inst["extra_args"].remove("--no-enable-prefix-caching")
    spec = spec_from_dict(fixed_data)
    assert validate_topology(spec, nodes) == []
    plan = build_plan(spec, nodes)
    configs = {p.key: p.launch.argv[p.launch.argv.index("--kv-events-config") + 1]
               for p in plan.processes if "--kv-events-config" in p.launch.argv}
    assert configs and all(parse_config(c).endpoint == parse_config(c).replay_endpoint == "tcp://*:0"
                           for c in configs.values())
    argv = next(p for p in plan.processes if p.role == "proxy").launch.argv
    prefills = argv[argv.index("--prefill") + 1:argv.index("--decode")]
    assert list(argv[argv.index("--kv-events") + 1:argv.index("--tokenizer")]) == [f"{a}=discover" for a in prefills]
    (tmp_path / "tokenizer.json").write_text("{}")
    cfg = config_from_args([*argv[argv.index("--host"):argv.index("--tokenizer")], "--tokenizer", str(tmp_path)])
    assert parse_specs(cfg.kv_events)[0] == dict.fromkeys(prefills, DISCOVER)


def test_without_kv_events_nothing_publishes_or_subscribes(fixed_data, nodes):
    fixed_data["proxy"]["policy"] = "cache_aware"
    plan = build_plan(spec_from_dict(fixed_data), nodes)
    assert not any("--kv-events-config" in p.launch.argv or "--kv-events" in p.launch.argv for p in plan.processes)
