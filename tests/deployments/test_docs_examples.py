"""vllm-ascend's own examples, rendered from a topology and compared with the docs' commands field by field.

The docs' scripts are transcribed below (vllm-ascend's KV pool guide, Steps 2.2.1, 2.3.1, 3.3 and 3.5.1, summarised in
docs/ascend-pd-launch-facts.md §3.5; the multi-node tutorial in §1.3) with their placeholders filled in
as the example topologies in examples/docs/ fill them. Every env var and flag the docs set must come out with the
same value; what we add on top is listed, so a new addition is a reviewed change. The rendered plans are pinned as
golden files too (tests/deployments/golden/docs-*.json).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from apps.deployments.topology import NodeFacts, build_plan, spec_from_yaml
from sshexec import EnvExtend
from tests.deployments.test_profiles_golden import check_golden, plan_as_json

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"
NODES = {f"node{i}": NodeFacts(f"node{i}", f"192.0.0.{i}", frozenset(range(16)), 16, "eth0") for i in range(5)}
A2_NODES = {n: NodeFacts(n, f.address, frozenset(range(8)), 8, "eth0") for n, f in NODES.items()}  # the guide's A2

# The KV pool guide's Step 2.3.1 run_prefill.sh / run_decode.sh, A2 branch (ROLE, LOCAL_IP, NIC_NAME, MODEL_PATH filled in).
MOONCAKE_DOC = {
    "prefill": ("""
export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
export PYTHONHASHSEED=0
export MOONCAKE_CONFIG_PATH="/var/lib/pdcp/kv-pool-example/config/mooncake.json"
export LD_LIBRARY_PATH=/usr/local/Ascend/ascend-toolkit/latest/python/site-packages/mooncake:$LD_LIBRARY_PATH
export HCCL_IF_IP=192.0.0.0
export GLOO_SOCKET_IFNAME=eth0
export TP_SOCKET_IFNAME=eth0
export HCCL_SOCKET_IFNAME=eth0
export HCCL_INTRA_ROCE_ENABLE=1
""", "kv_producer", "20001", "0"),
    "decode": ("""
export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
export PYTHONHASHSEED=0
export MOONCAKE_CONFIG_PATH="/var/lib/pdcp/kv-pool-example/config/mooncake.json"
export LD_LIBRARY_PATH=/usr/local/Ascend/ascend-toolkit/latest/python/site-packages/mooncake:$LD_LIBRARY_PATH
export HCCL_IF_IP=192.0.0.1
export GLOO_SOCKET_IFNAME=eth0
export TP_SOCKET_IFNAME=eth0
export HCCL_SOCKET_IFNAME=eth0
export HCCL_INTRA_ROCE_ENABLE=1
""", "kv_consumer", "20002", "1"),
}
DOC_ARGS = """--model /models/Qwen3-32B --served-model-name qwen3 --trust-remote-code --enforce-eager
  --data-parallel-size 1 --tensor-parallel-size 8 --port 30050 --max-num_seqs 20 --max-model-len 32768
  --max-num-batched-tokens 16384 --gpu-memory-utilization 0.9"""
# Step 2.2.1's mooncake.json without the SSD-offload keys, master filled in.
DOC_MOONCAKE_JSON = {"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
                     "master_server_address": "192.0.0.0:50088", "global_segment_size": "1GB",
                     "preferred_segment": False, "prefer_alloc_in_same_node": True}
# What the profile sets beyond the guide (docs/ascend-pd-launch-facts.md §1.2 and our pinning of every listener).
OUR_ENV = {"OMP_PROC_BIND", "OMP_NUM_THREADS", "PYTORCH_NPU_ALLOC_CONF", "TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE",
           "VLLM_USE_V1", "HCCL_BUFFSIZE"}
OUR_FLAGS = {"--host"}
DEFAULTS = {"--data-parallel-size": "1"}  # what the guide spells out and vLLM assumes when it is left out


def exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.strip().splitlines():
        name, value = line.removeprefix("export ").split("=", 1)
        out[name] = shlex.split(value)[0] if value.startswith('"') else value
    return out


def flags(argv) -> dict[str, str | None]:
    """--flag -> value (None for a switch); vLLM reads _ and - alike in flag names, and the model may be positional."""
    out, i = {}, 0
    argv = list(argv)
    if argv[:2] == ["vllm", "serve"]:
        out["--model"], argv = argv[2], argv[3:]
    while i < len(argv):
        name = argv[i].replace("_", "-")
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        out[name] = value
        i += 2 if value is not None else 1
    return out


def rendered_env(env) -> dict[str, str]:
    def show(name, v):
        return v if isinstance(v, str) else f"{v.prepend}{v.separator}${name}" if v.prepend else f"${name}:{v.append}"
    return {k: show(k, v) for k, v in env.items()}


def plan_of(name: str):
    return build_plan(spec_from_yaml((EXAMPLES / name).read_text()), A2_NODES if "kv-pool" in name else NODES)


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_pd_with_a_mooncake_pool_renders_the_guides_command(role):
    doc_env, kv_role, kv_port, lookup = MOONCAKE_DOC[role]
    engine = next(p for p in plan_of("kv-pool-mooncake.yaml").processes if p.role == role)
    env = rendered_env(engine.launch.env)
    for name, value in exports(doc_env).items():
        assert env.get(name) == value, name
    assert set(env) - set(exports(doc_env)) == OUR_ENV
    ours = flags(engine.launch.argv)
    kv = json.loads(ours.pop("--kv-transfer-config"))
    doc = {**flags(shlex.split(DOC_ARGS))}
    for flag, value in doc.items():
        assert ours.get(flag, DEFAULTS.get(flag)) == value, flag
    assert set(ours) - set(doc) == OUR_FLAGS
    assert kv == {"kv_connector": "MultiConnector", "kv_role": kv_role, "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "MooncakeConnectorV1", "kv_role": kv_role, "kv_port": kv_port,
         "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 8}, "decode": {"dp_size": 1, "tp_size": 8}}},
        {"kv_connector": "AscendStoreConnector", "kv_role": kv_role,
         "kv_connector_extra_config": {"backend": "mooncake", "lookup_rpc_port": lookup}}]}}
    (config,) = engine.launch.files
    assert str(config.path) == env["MOONCAKE_CONFIG_PATH"] and json.loads(config.content) == DOC_MOONCAKE_JSON


def test_the_mooncake_master_is_the_guides_command_bound_to_its_node():
    master = plan_of("kv-pool-mooncake.yaml").stages[0].processes[0]
    doc = flags(shlex.split("--port 50088 --eviction_high_watermark_ratio 0.9 --eviction_ratio 0.1 "
                            "--default_kv_lease_ttl 11000 --enable_offload=false --client_ttl=120"))
    ours = flags(master.launch.argv[1:])
    assert master.launch.argv[0] == "mooncake_master"
    for flag, value in doc.items():
        assert ours.get(flag) == value, flag
    assert set(ours) - set(doc) == {"--rpc-address", "--metrics-host", "--metrics-port", "--logtostderr=true"}


def test_pd_with_a_memcache_pool_renders_the_guides_command_and_config_files():
    plan = plan_of("kv-pool-memcache.yaml")
    prefill = next(p for p in plan.processes if p.role == "prefill")
    env = prefill.launch.env
    # Step 3.5.1: LD_LIBRARY_PATH={INSTALL_PATH}/memcache_hybrid/lib:${PYTHON_LIB_DIR}:${LD_LIBRARY_PATH}
    assert env["LD_LIBRARY_PATH"] == EnvExtend(prepend="/usr/local/lib/python3.11/site-packages/memcache_hybrid/lib:"
                                                       "/usr/local/lib")
    assert env["MMC_LOCAL_CONFIG_PATH"] == "/var/lib/pdcp/kv-pool-memcache-example/config/mmc-local.conf"
    assert env["PYTHONHASHSEED"] == "0"
    kv = json.loads(prefill.launch.argv[prefill.launch.argv.index("--kv-transfer-config") + 1])
    assert kv["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"] == {
        "backend": "memcache", "lookup_rpc_port": "0"}
    local = dict(line.split(" = ") for line in prefill.launch.files[0].content.splitlines())
    assert local == {"ock.mmc.meta_service_url": "tcp://192.0.0.1:5000",
                     "ock.mmc.local_service.config_store_url": "tcp://192.0.0.1:6000", "ock.mmc.log_level": "info",
                     "ock.mmc.local_service.world_size": "256", "ock.mmc.local_service.protocol": "device_rdma",
                     "ock.mmc.local_service.dram.size": "1GB"}
    meta = plan.stages[0].processes[0]
    assert meta.launch.argv == ("python3", "-c", "from memcache_hybrid import MetaService; MetaService.main()")
    assert meta.launch.env["MMC_META_CONFIG_PATH"] == str(meta.launch.files[0].path)
    assert dict(line.split(" = ") for line in meta.launch.files[0].content.splitlines()) == {
        "ock.mmc.meta_service_url": "tcp://192.0.0.1:5000", "ock.mmc.meta_service.config_store_url": "tcp://192.0.0.1:6000",
        "ock.mmc.meta_service.metrics_url": "http://192.0.0.1:8000", "ock.mmc.log_level": "info"}
    assert not any(p.launch.argv[0] == "memcached" for p in plan.processes)


def test_two_node_decode_matches_the_tutorials_launchers():
    # launch_online_dp.py --dp-size 32 --tp-size 1 --dp-size-local 16 --dp-rank-start 16 --dp-address 192.0.0.3
    #   --dp-rpc-port 12321 --vllm-start-port 7100 on node 4: ranks 16..31 on ports 7100..7115, device i for rank 16+i.
    plan = plan_of("two-node-decode.yaml")
    d0 = [p for p in plan.processes if p.instance == "d0"]
    assert len(d0) == 32
    node4 = [p for p in d0 if p.node == "node4"]
    assert [p.dp_rank for p in node4] == list(range(16, 32))
    for i, p in enumerate(node4):
        f = flags(p.launch.argv)
        assert (f["--port"], f["--data-parallel-size"], f["--data-parallel-rank"], f["--data-parallel-address"],
                f["--data-parallel-rpc-port"], f["--tensor-parallel-size"]) == (
            str(7100 + i), "32", str(16 + i), "192.0.0.3", "12321", "1")
        assert p.launch.env["ASCEND_RT_VISIBLE_DEVICES"] == str(i)
        assert p.kv_port_window == (36200 + 16 + i, 36200 + 16 + i)  # the tutorial: node 4 uses 36216-36231
    proxy = flags(plan.stages[-1].processes[0].launch.argv[3:])
    assert proxy["--prefill"] is not None
    kv = json.loads(d0[0].launch.argv[d0[0].launch.argv.index("--kv-transfer-config") + 1])
    assert kv["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 8}, "decode": {"dp_size": 32, "tp_size": 1}}


@pytest.mark.parametrize("name", ["kv-pool-mooncake", "kv-pool-memcache", "two-node-decode"])
def test_docs_examples_golden(name):
    check_golden(f"docs-{name}.json", plan_as_json(plan_of(f"{name}.yaml")))
