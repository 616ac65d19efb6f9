"""launch_profile vllm-cpu (profiles/vllm_cpu.py, docs/real-engine.md): what it renders for
examples/real-engine-1p1d.yaml (pinned as golden/real-engine-1p1d.json), the rules a first version keeps
(topology/cpu_rules.py), preflight's verdicts on faked node output, and the health gate's floor and progress line.
Nothing here starts a process: the real engines run in tests/realengine/."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from apps.deployments.fleet import Outcome
from apps.deployments.runtimes import RUNTIMES, health_gate
from apps.deployments.runtimes.process_jobs.preflight import node_problems, node_script
from apps.deployments.topology import NodeFacts, build_plan, get_profile, spec_from_dict, validate_topology
from apps.deployments.topology.placement import assign_devices
from sshexec import probe_commands as remote
from sshexec.connection import CommandResult
from tests.deployments.conftest import reference_inventory
from tests.deployments.test_profiles_golden import check_golden, plan_as_json

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "real-engine-1p1d.yaml"
ENGINE = "/opt/pdcp-vllm-cpu/bin/vllm"
MODEL = "/opt/pdcp-vllm-cpu/models/tiny-llama"


@pytest.fixture
def data() -> dict:
    return copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))


@pytest.fixture
def plan(data):
    return build_plan(spec_from_dict(data), reference_inventory())


def _proc(plan, key):
    return next(p for p in plan.processes if p.key == key)


def _problems(data, nodes=None):
    return validate_topology(spec_from_dict(data), nodes or reference_inventory())


def _paths(data, nodes=None):
    return {p.path for p in _problems(data, nodes)}


# --- what it renders ----------------------------------------------------------------------------------------------

def test_example_golden(plan):
    check_golden("real-engine-1p1d.json", plan_as_json(plan))


def test_example_validates_and_runs_engines_then_the_proxy(plan):
    assert plan.profile == "vllm-cpu"
    assert [s.name for s in plan.stages] == ["engines", "proxy"]
    assert [p.key for p in plan.processes] == ["p0-dp0", "d0-dp0", "proxy"]


@pytest.mark.parametrize(("key", "address", "role"), [("p0-dp0", "127.0.10.1", "kv_producer"),
                                                      ("d0-dp0", "127.0.10.2", "kv_consumer")])
def test_engine_argv(plan, key, address, role):
    argv = list(_proc(plan, key).launch.argv)
    transfer = argv.index("--kv-transfer-config") + 1
    assert argv[:transfer + 1] == [ENGINE, "serve", MODEL, "--host", address, "--port", "8100",
                                   "--tensor-parallel-size", "1", "--served-model-name", "tiny", "--max-model-len",
                                   "1024", "--max-num-seqs", "8", "--optimization-level", "0",  # the example's
                                   "--kv-transfer-config", argv[transfer]]
    assert json.loads(argv[transfer]) == {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cpu"}
    # the example's cache_aware reads the Prefill's KV events (test_kv_events_on_ports_the_engine_picks...); the
    # model runs in the EngineCore (vllm_cpu.EXECUTOR, with VLLM_ENABLE_V1_MULTIPROCESSING=0 in the env: a separate
    # Worker made a decode step wait up to 5 s)
    events = ["--kv-events-config", argv[transfer + 2]] if role == "kv_producer" else []
    assert argv[transfer + 1:] == [*events, "--distributed-executor-backend", "uni"]


def test_an_operators_executor_backend_replaces_the_profiles(data):
    data["instances"][1]["extra_args"] = ["--distributed-executor-backend", "mp"]
    assert _problems(data) == []
    argv = list(_proc(build_plan(spec_from_dict(data), reference_inventory()), "d0-dp0").launch.argv)
    assert argv.count("--distributed-executor-backend") == 1
    assert argv[argv.index("--distributed-executor-backend") + 1] == "mp"


@pytest.mark.parametrize(("key", "address"), [("p0-dp0", "127.0.10.1"), ("d0-dp0", "127.0.10.2")])
def test_engine_env_keeps_every_listener_on_the_nodes_address_or_lo(plan, key, address):
    env = dict(_proc(plan, key).launch.env)
    assert env == {
        "VLLM_HOST_IP": address, "VLLM_LOOPBACK_IP": address, "VLLM_NIXL_SIDE_CHANNEL_HOST": address,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600", "GLOO_SOCKET_IFNAME": "lo", "UCX_NET_DEVICES": "lo",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert not any(k.startswith(("ASCEND", "HCCL", "PYTORCH_NPU")) for k in env)
    p = _proc(plan, key)
    assert p.health_url == f"http://{address}:8100/health"
    assert p.kv_port_window == (5600, 5600)  # the NIXL side channel (+ DP index 0)


def test_proxy_is_pdproxy_as_on_the_sim_nodes(plan):
    argv = list(_proc(plan, "proxy").launch.argv)
    assert argv[:9] == ["pdproxy", "--host", "127.0.10.5", "--port", "2001", "--prefill", "127.0.10.1:8100",
                        "--decode", "127.0.10.2:8100"]
    assert "--pd-flow" not in argv  # pull, pdproxy's default: what NixlConnector does
    assert argv[argv.index("--admin-host") + 1] == "127.0.10.5"  # sim nodes share 127.0.0.1
    assert dict(_proc(plan, "proxy").launch.env) == {}


def test_kv_events_on_ports_the_engine_picks_and_the_proxy_asks_for(data):
    """proxy.kv_events with port 0: the Prefill publishes on tcp://*:0, which vLLM binds on VLLM_HOST_IP (the node's
    address) at a port of its choosing, and the proxy asks the engine where (pdproxy --kv-events HOST:PORT=discover)."""
    data["proxy"].update(policy="cache_aware", kv_events={"port": 0, "replay_port": 0})
    assert _problems(data) == []
    plan = build_plan(spec_from_dict(data), reference_inventory())
    argv = list(_proc(plan, "p0-dp0").launch.argv)
    assert json.loads(argv[argv.index("--kv-events-config") + 1]) == {
        "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0"}
    assert dict(_proc(plan, "p0-dp0").launch.env)["VLLM_HOST_IP"] == "127.0.10.1"
    assert "--kv-events-config" not in _proc(plan, "d0-dp0").launch.argv
    proxy = list(_proc(plan, "proxy").launch.argv)
    assert proxy[proxy.index("--kv-events"):proxy.index("--kv-events") + 4] == [
        "--kv-events", "127.0.10.1:8100=discover", "--tokenizer", MODEL]


def test_a_non_loopback_node_uses_its_nic_and_the_operators_env_and_engine_id(data):
    nodes = {n: NodeFacts(n, f"10.0.0.{i}", frozenset(), 0, "ens3") for i, n in enumerate(("node0", "node1", "proxy"))}
    data["instances"][0]["env"] = {"VLLM_CPU_KVCACHE_SPACE": "4", "OMP_NUM_THREADS": "2"}
    data["instances"][0]["engine_id"] = "p0-engine"
    plan = build_plan(spec_from_dict(data), nodes)
    p0 = _proc(plan, "p0-dp0")
    assert p0.launch.env["GLOO_SOCKET_IFNAME"] == p0.launch.env["UCX_NET_DEVICES"] == "ens3"
    assert p0.launch.env["VLLM_CPU_KVCACHE_SPACE"] == "4" and p0.launch.env["OMP_NUM_THREADS"] == "2"
    argv = p0.launch.argv
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1])["engine_id"] == "p0-engine"
    assert _proc(plan, "proxy").launch.argv[_proc(plan, "proxy").launch.argv.index("--admin-host") + 1] == "127.0.0.1"


def test_nodes_without_npus_are_fine_and_no_dies_are_claimed(data):
    nodes = {n: NodeFacts(n, f.address, frozenset(), 0, "eth0") for n, f in reference_inventory().items()}
    assert _problems(data, nodes) == []
    spec = spec_from_dict(data)
    assert all(d == () for d in assign_devices(spec, reference_inventory()).values())


def test_the_same_nodes_without_npus_are_refused_for_vllm_ascend(data):
    nodes = {n: NodeFacts(n, f.address, frozenset(), 0, "eth0") for n, f in reference_inventory().items()}
    data["launch_profile"] = "vllm-ascend"
    assert "instances[0].node" in _paths(data, nodes)


# --- the rules of a first version -------------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "path", "words"), [
    (lambda d: d["instances"][0].update(tp=2), "instances[0].tp", "TP1"),
    (lambda d: d["instances"][1].update(dp=2, dp_rpc_port=12321), "instances[1].dp", "DP1"),
    (lambda d: d.update(kv_connector="layerwise"), "kv_connector", "NixlConnector"),
    (lambda d: d.update(kv_pool={"backend": "mooncake", "node": "proxy", "rpc_port": 50088, "metrics_port": 9003,
                                 "segment_size": "1GB"}), "kv_pool", "no CPU KV pool"),
    (lambda d: d.update(store={"servers": [{"node": "proxy", "port": 11211}]}), "store", "stand-in"),
    (lambda d: d["proxy"].update(policy="cache_aware", kv_events={"port": 5557}), "proxy.kv_events.port",
     "every interface"),
    (lambda d: d["proxy"].update(policy="cache_aware", kv_events={"port": 0, "replay_port": 5558}),
     "proxy.kv_events.replay_port", "replay port tcp://*:5558"),
    (lambda d: d.update(simulation={"answer_book": "made-up-aime"}), "simulation", "simulated model"),
    (lambda d: d["instances"][0].update(devices=[0]), "instances[0].devices", "no NPU dies"),
    (lambda d: d["instances"][0].update(env={"VLLM_HOST_IP": "0.0.0.0"}), "instances[0].env.VLLM_HOST_IP",
     "rendered from"),
    (lambda d: d["instances"][0].update(env={"ASCEND_RT_VISIBLE_DEVICES": "0"}),
     "instances[0].env.ASCEND_RT_VISIBLE_DEVICES", "not one the vllm-cpu profile"),
    (lambda d: d["instances"][0].update(extra_args=["--quantization", "ascend"]), "instances[0].extra_args[0]",
     "not an engine flag"),
])
def test_each_rule_names_its_field_and_a_fix(data, change, path, words):
    assert _problems(data) == []
    change(data)
    found = [p for p in _problems(data) if p.path == path]
    assert found, [str(p) for p in _problems(data)]
    assert words in found[0].message and found[0].suggestion


def test_the_cpu_knobs_are_allowed(data):
    data["instances"][1]["env"] = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
                                   "VLLM_LOGGING_LEVEL": "DEBUG"}
    data["instances"][1]["extra_args"] = ["--enforce-eager", "--dtype", "bfloat16"]
    assert _problems(data) == []


def test_the_rules_leave_the_other_profiles_alone(data):
    data["launch_profile"] = "sim"
    data["instances"][0]["tp"] = 2
    assert "instances[0].tp" not in _paths(data)


# --- preflight on faked node output -----------------------------------------------------------------------------

def _answer(*, binaries: str, files: str = "", ss: str = "") -> str:
    return "\n".join(["@@binaries", binaries, "@@ports", ss, "@@disk",
                      "/dev/sda1 100000000 1000 99999000 1% /", "@@rundir", remote.RUN_DIR_OK, "@@files", files])


def _node_problems(plan, node, stdout):
    spec = spec_from_dict(yaml.safe_load(EXAMPLE.read_text()))
    procs = [p for p in plan.processes if p.node == node]
    return node_problems(get_profile("vllm-cpu"), spec, node, procs[0].address, procs, {}, stdout)


def test_preflight_script_reads_no_npu_smi_and_checks_the_model(plan):
    spec = spec_from_dict(yaml.safe_load(EXAMPLE.read_text()))
    script = node_script(get_profile("vllm-cpu"), spec, [_proc(plan, "p0-dp0")])
    assert "npu-smi" not in script and "@@npu" not in script
    assert f"{MODEL}/config.json" in script and ENGINE in script
    proxy = node_script(get_profile("vllm-cpu"), spec, [_proc(plan, "proxy")])
    assert "config.json" not in proxy  # the proxy node holds no model


def test_preflight_all_present_is_clean(plan):
    out = _answer(binaries=f"ok {ENGINE}\nok curl", files=f"ok {MODEL}/config.json")
    assert _node_problems(plan, "node0", out) == []


def test_preflight_names_the_missing_engine_and_how_to_install_it(plan):
    out = _answer(binaries=f"ok curl\nmissing {ENGINE}", files=f"ok {MODEL}/config.json")
    assert _node_problems(plan, "node1", out) == [
        f"`{ENGINE}` is missing on node1: install the real engine with `make real-engine` (docs/real-engine.md)"]


def test_preflight_names_a_missing_model(plan):
    out = _answer(binaries=f"ok {ENGINE}\nok curl", files=f"missing {MODEL}/config.json")
    (problem,) = _node_problems(plan, "node0", out)
    assert problem.startswith(f"`{MODEL}/config.json` is missing on node0: model.path {MODEL} holds no config.json")
    assert "make real-engine" in problem


def test_preflight_still_says_login_path_for_other_binaries(plan):
    out = _answer(binaries="missing pdproxy\nok curl")
    assert _node_problems(plan, "proxy", out) == ["`pdproxy` is not on the login PATH"]


# --- the health gate: a floor for real engines, and what it reports while they start -----------------------------

def _run(profile: str, health_timeout: int = 120):
    return SimpleNamespace(options=SimpleNamespace(health_timeout=health_timeout),
                           spec=SimpleNamespace(launch_profile=profile), plan=SimpleNamespace(profile=profile))


def test_health_timeout_has_the_profiles_floor_for_engines(plan):
    engines, proxy = [_proc(plan, "p0-dp0"), _proc(plan, "d0-dp0")], [_proc(plan, "proxy")]
    assert health_gate.health_timeout(_run("vllm-cpu"), engines) == 600
    assert health_gate.health_timeout(_run("vllm-cpu", 900), engines) == 900  # an operator's longer wait stands
    assert health_gate.health_timeout(_run("vllm-cpu"), proxy) == 120  # the proxy starts in seconds
    assert health_gate.health_timeout(_run("sim"), engines) == 120
    assert health_gate.health_timeout(_run("vllm-ascend", 30), engines) == 30


def test_progress_line_quotes_the_last_log_line():
    line = "INFO 05-01 10:00:00 [core.py:402] init engine (profile, create kv cache, warmup model) took 43.25 s"
    assert health_gate.starting_line("p0-dp0", 40, line) == f"p0-dp0 starting (40 s): {line}"
    assert health_gate.starting_line("d0-dp0", 10, "") == "d0-dp0 starting (10 s): (nothing logged yet)"


def test_one_command_per_node_reads_every_engines_last_line(plan):
    engines = [_proc(plan, "p0-dp0"), _proc(plan, "d0-dp0")]
    command = health_gate.last_lines_command(engines)
    assert command.count("tail -n 1") == 2 and str(engines[0].launch.log_file) in command
    assert health_gate.parse_last_lines("@@p0-dp0\nINFO a\nINFO b\n@@d0-dp0\n") == {"p0-dp0": "INFO b", "d0-dp0": ""}


def test_report_starting_logs_each_engine_with_one_ssh_command_per_node(plan):
    """Each node's line says how far its engines got, but counts no step: a fresh-clone deploy's bars read 333%
    when every 10 s report counted one."""
    from apps.jobs.choices import NodeStepState

    sent, logged, states = [], [], []

    def run_many(pairs, **_):
        sent.extend(pairs)
        out = {"node0": "@@p0-dp0\nINFO [core.py:402] init engine took 43.25 s\n", "node1": "@@d0-dp0\n"}
        return [Outcome(node, cmd, CommandResult(0, out[node], "", 0.1), None) for node, cmd in pairs]

    def node_state(node, state, message="", step_done=False):
        states.append((node, state, message, step_done))

    run = SimpleNamespace(fleet=SimpleNamespace(run_many=run_many), runtime=RUNTIMES["host"],
                          ctx=SimpleNamespace(log=lambda m, node=None, **_: logged.append((node, m)),
                                              node_state=node_state),
                          progress=lambda node, m: pytest.fail("a progress report is not a step done"))
    health_gate.report_starting(run, [_proc(plan, "p0-dp0"), _proc(plan, "d0-dp0")], 40)
    assert [node for node, _ in sent] == ["node0", "node1"]
    assert logged == [("node0", "p0-dp0 starting (40 s): INFO [core.py:402] init engine took 43.25 s"),
                      ("node1", "d0-dp0 starting (40 s): (nothing logged yet)")]
    assert states == [(node, NodeStepState.RUNNING, m, False) for node, m in logged]


@pytest.mark.django_db
def test_the_example_fits_beside_the_demo_deployment_make_run_creates(deployment, make_user):
    """`make run` keeps reference-sim (the reference topology) on the same nodes: the example must not claim its
    proxy's ports (a fresh-clone try of `pdcp deployment create … -f examples/real-engine-1p1d.yaml` was refused)."""
    from apps.deployments.services import deployment_create

    real = deployment_create(name="real-engine-1p1d", cluster=deployment.cluster, user=make_user("operator", "op"),
                             yaml_text=EXAMPLE.read_text())
    assert real.active_revision is not None
