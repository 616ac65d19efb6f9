"""The engine reads the connector config a real vllm-ascend reads: a bad one stops it with the real message, a good
one puts it in the KV pool its mooncake.json (a real mooncake_master started here) or mmc-local.conf (real
memcached) names, and Prefill / Decode use that pool for prefix blocks as vllm-ascend's AscendStoreConnector does.

Addresses: 127.0.10.135 (master, memcached), .136-.139 engines, .144 the lookup collision node.
"""

import json
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest

from simcluster import profiles
from simcluster.engine import poolconfig
from simcluster.engine.kvconfig import KVConfigError
from tests.simcluster.simtest_helpers import (
    free_port,
    metric,
    pool_kv_config,
    post,
    sim_env,
    start_mooncake_master,
    wait_http,
    wait_until,
    write_mooncake_json,
)

SVC, P_HOST, D_HOST = "127.0.10.135", "127.0.10.136", "127.0.10.137"
MODEL = "/models/ds_r1"
BLOCKS = 8
PROMPT = " ".join(f"w{i}" for i in range(BLOCKS * profiles.BLOCK_SIZE + 20))  # 8 full blocks and a tail
SEGMENT = poolconfig.SIM_SEGMENT_CAP  # what 1GB of global_segment_size becomes per simulated engine


def engine_argv(host, port, kv, *extra):
    return [sys.executable, "-m", "simcluster.engine", "serve", MODEL, "--host", host, "--port", str(port),
            "--served-model-name", "ds_r1", "--kv-transfer-config", json.dumps(kv), *extra]


def engine_env(log_dir, host, **env):
    """sim_env with PYTHONHASHSEED=0 and a node dir per host below log_dir (the lookup sockets go there, never
    into the shared temp dir); a None value removes the variable."""
    node = log_dir / f"node-{host}"
    node.mkdir(exist_ok=True)
    full = sim_env(PYTHONHASHSEED="0", SIMCLUSTER_NODE_DIR=str(node))
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = str(value)
    return full


def start_engine(spawn, log_dir, host, kv, *extra, **env):
    port = free_port(host)
    t0 = time.monotonic()
    proc = spawn(engine_argv(host, port, kv, *extra), engine_env(log_dir, host, **env), log_dir / f"{host}-{port}.log")
    base = f"http://{host}:{port}"
    wait_http(base + "/health", proc=proc)
    return proc, base, time.monotonic() - t0


def run_engine(kv, log_dir, env=None, timeout=60):
    """Start an engine that must fail; returns (exit code, stderr)."""
    argv = engine_argv("127.0.10.139", free_port("127.0.10.139"), kv)
    if not isinstance(kv, dict):
        argv[argv.index("--kv-transfer-config") + 1] = kv
    done = subprocess.run(argv, env=engine_env(log_dir, "127.0.10.139", **(env or {})), capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stderr


def completion(base, prompt=PROMPT, **extra):
    t0 = time.monotonic()
    body = post(base + "/v1/completions", {"model": "ds_r1", "prompt": prompt, "max_tokens": 1, **extra})
    return body, time.monotonic() - t0


# -- the config matrix -------------------------------------------------------------------------------------

P2P = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": "30000",
       "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}}


def multi(store_extra=None, store=None, top=None):
    child = store or {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
                      "kv_connector_extra_config": {"backend": "mooncake", "lookup_rpc_port": "1",
                                                    **(store_extra or {})}}
    return {"kv_connector": "MultiConnector", "kv_role": "kv_producer", **(top or {}),
            "kv_connector_extra_config": {"connectors": [P2P, child]}}


def mooncake_file(tmp_path, **fields):
    data = {"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
            "master_server_address": "127.0.10.135:1", "global_segment_size": "1GB", **fields}
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps(data))
    return str(path)


CASES = [
    # (id, config, env maker, exit code, message)
    ("unknown-connector", {"kv_connector": "FooConnector", "kv_role": "kv_producer"}, None, 1,
     "ValueError: Unsupported connector type: FooConnector"),
    ("unknown-child", multi(store={"kv_connector": "BarConnector", "kv_role": "kv_producer"}), None, 1,
     "ValueError: Unsupported connector type: BarConnector"),
    ("upstream-mooncake", {**P2P, "kv_connector": "MooncakeConnector"}, None, 1, "use MooncakeConnectorV1"),
    ("registered-not-simulated", {**P2P, "kv_connector": "NixlConnector"}, None, 1, "not simulated"),
    ("bad-role", {**P2P, "kv_role": "producer"}, None, 2,
     "Input should be 'kv_producer', 'kv_consumer' or 'kv_both' [type=literal_error"),
    ("no-role", {"kv_connector": "MooncakeConnectorV1"}, None, 2, "Please specify kv_disagg_role"),
    ("bad-failure-policy", multi(top={"kv_load_failure_policy": "retry"}), None, 2,
     "kv_load_failure_policy\n  Input should be 'recompute' or 'fail'"),
    ("bad-json", '{"kv_connector": "MultiConnector",', None, 2, "Invalid JSON"),
    ("bad-kv-port", {**P2P, "kv_port": "thirty"}, None, 2, "Input should be a valid integer"),
    ("multi-without-connectors", {"kv_connector": "MultiConnector", "kv_role": "kv_producer"}, None, 1,
     "AssertionError"),
    ("child-without-role", multi(store={"kv_connector": "AscendStoreConnector"}), None, 1,
     "pydantic_core._pydantic_core.ValidationError: 1 validation error for KVTransferConfig"),
    ("p2p-without-sizes", {**P2P, "kv_connector_extra_config": {}}, None, 1, "AssertionError"),
    ("unknown-backend", multi({"backend": "redis"}), None, 1, "ValueError: Unsupported KV pool backend: redis"),
    ("yuanrong", multi({"backend": "yuanrong"}), None, 1, "yuanrong backend"),
    ("no-mooncake-config-path", multi(), lambda t: {}, 1,
     "ValueError: The environment variable 'MOONCAKE_CONFIG_PATH' is not set."),
    ("missing-mooncake-json", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": str(t / "nope.json")}, 1,
     "FileNotFoundError: [Errno 2] No such file or directory"),
    ("mooncake-json-not-json", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": str(_write(t / "m.json", "{master"))}, 1,
     "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes"),
    ("protocol-tcp", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": mooncake_file(t, protocol="tcp")}, 1,
     "NotImplementedError: MooncakeBackend does not support protocol 'tcp'."),
    ("bad-segment-size", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": mooncake_file(t, global_segment_size="1 TB")}, 1,
     "ValueError: Invalid format: '1 TB'"),
    ("bad-segment-env", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": mooncake_file(t),
                                            "MOONCAKE_GLOBAL_SEGMENT_SIZE": "lots"}, 1,
     "ValueError: Invalid format: 'lots'"),
    ("relative-ssd-path", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": mooncake_file(
        t, enable_ssd_offload=True, ssd_offload_path="offload")}, 1, "ssd_offload_path must be an absolute path"),
    ("no-master-address", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": mooncake_file(t, master_server_address=None)},
     1, "master_server_address (or MOONCAKE_MASTER) must be HOST:PORT"),
    ("master-unreachable", multi(), lambda t: {"MOONCAKE_CONFIG_PATH": mooncake_file(t)}, 1,
     "RuntimeError: Initialize mooncake failed."),
    ("no-mmc-config-path", multi({"backend": "memcache"}), lambda t: {}, 1,
     "ValueError: The environment variable 'MMC_LOCAL_CONFIG_PATH' is not set."),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.procs
@pytest.mark.parametrize("config,env,code,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_connector_config_stops_the_engine_with_the_real_message(state_root, config, env, code, message):
    # state_root, not tmp_path: a lookup socket's path must fit a Unix socket's 107 bytes, and tmp_path under
    # xdist (/tmp/pytest-of-root/pytest-N/popen-gw0/test_…) uses most of them.
    rc, stderr = run_engine(config, state_root, env(state_root) if env else None)
    assert rc == code and message in stderr, stderr[-2000:]


def test_segment_sizes_parse_like_vllm_ascend():
    assert poolconfig.parse_size("1GB") == 1 << 30
    assert poolconfig.parse_size(" 1024 mb ") == 1 << 30
    assert poolconfig.parse_size("1.5GB") == 3 << 29
    assert poolconfig.parse_size("64KB") == 65536
    assert poolconfig.parse_size("4096") == poolconfig.parse_size("4096B") == 4096
    assert poolconfig.parse_size(1073741824) == 1 << 30
    for bad in ("", "GB", "1 TB", "-1GB"):
        with pytest.raises(KVConfigError):
            poolconfig.parse_size(bad)
    with pytest.raises(KVConfigError, match="TypeError: Unsupported type for global_segment_size"):
        poolconfig.parse_size([1])


def test_mooncake_env_overrides_the_file_and_the_segment_is_scaled_down(tmp_path):
    path = mooncake_file(tmp_path, local_buffer_size="512MB")
    pool = poolconfig.mooncake({"MOONCAKE_CONFIG_PATH": path})
    assert pool.master == "127.0.10.135:1" and pool.global_segment_size == 1 << 30
    assert pool.sim_segment_size == 64 << 20 and pool.sim_local_buffer == 16 << 20
    assert pool.prefer_alloc_in_same_node is True and pool.preferred_segment is False  # vllm-ascend's defaults
    pool = poolconfig.mooncake({"MOONCAKE_CONFIG_PATH": path, "MOONCAKE_MASTER": "127.0.10.2:50088",
                                "MOONCAKE_GLOBAL_SEGMENT_SIZE": "256MB"})
    assert pool.master == "127.0.10.2:50088" and pool.global_segment_size == 256 << 20
    assert pool.sim_segment_size == 16 << 20


def test_mmc_local_conf_names_the_ring_or_falls_back_to_the_meta_service(tmp_path):
    conf = tmp_path / "mmc-local.conf"
    conf.write_text("# MemCache local service\nock.mmc.meta_service_url = tcp://127.0.10.2:5000\n"
                    "ock.mmc.local_service.protocol = device_sdma\n")
    pool = poolconfig.memcache({"MMC_LOCAL_CONFIG_PATH": str(conf)})
    assert pool.servers == ["127.0.10.2:5000"] and pool.replicas == 1
    conf.write_text(conf.read_text() + "simcluster.ring = 127.0.10.2:11211, 127.0.10.3:11211\n")
    pool = poolconfig.memcache({"MMC_LOCAL_CONFIG_PATH": str(conf)})
    assert pool.servers == ["127.0.10.2:11211", "127.0.10.3:11211"] and pool.replicas == 2
    conf.write_text(conf.read_text() + "simcluster.replicas = 0\n")
    with pytest.raises(KVConfigError, match="simcluster.replicas must be a positive integer"):
        poolconfig.memcache({"MMC_LOCAL_CONFIG_PATH": str(conf)})


# -- the Mooncake pool ------------------------------------------------------------------------------------

@pytest.mark.procs
def test_prefill_and_decode_share_the_mooncake_pool_their_mooncake_json_names(spawn, state_root):
    master, master_metrics = start_mooncake_master(spawn, SVC, state_root)
    config = write_mooncake_json(state_root / "mooncake.json", master)
    env = {"MOONCAKE_CONFIG_PATH": str(config), "SIMCLUSTER_TIME_SCALE": "1"}
    p_dir, d_dir = state_root / f"node-{P_HOST}", state_root / f"node-{D_HOST}"
    _p, p, p_start = start_engine(spawn, state_root, P_HOST, pool_kv_config("kv_producer", free_port(P_HOST), 0),
                                  "--no-enable-prefix-caching", **env)
    _d, d, d_start = start_engine(spawn, state_root, D_HOST,
                                  pool_kv_config("kv_consumer", free_port(D_HOST), 1, consumer_is_to_load=True),
                                  **env)
    print(f"engine start with the mooncake pool: P {p_start:.2f} s, D {d_start:.2f} s")
    assert (p_dir / "lookup_rpc_port_0_dp_rank0").is_socket() and (d_dir / "lookup_rpc_port_1_dp_rank0").is_socket()
    # Every engine registers its own (scaled) segment: the capacity grows with each one that joins.
    assert metric(master_metrics, "master_total_capacity_bytes") == 2 * SEGMENT
    assert metric(master_metrics, "master_key_count") == 0

    # 1. P -> D, as the proxy does it. P backs the prompt's full blocks up after answering.
    first, cold = completion(p, kv_transfer_params={"do_remote_decode": True})
    post(d + "/v1/completions", {"model": "ds_r1", "prompt": PROMPT, "max_tokens": 2,
                                 "kv_transfer_params": first["kv_transfer_params"]})
    wait_until(lambda: metric(master_metrics, "master_key_count") == BLOCKS, what="P's blocks in the pool")
    assert metric(p, "simcluster:store_blocks_total", tier="mooncake", op="backup") == BLOCKS
    assert metric(d, "simcluster:store_blocks_total", op="backup") == 0  # consumer_is_to_put is off
    assert metric(d, "vllm:external_prefix_cache_hits_total") == len(PROMPT.split())  # pulled from P

    # 2. The same prompt again: P (no local prefix cache) loads the 8 blocks from the pool instead of computing.
    _second, warm = completion(p, kv_transfer_params={"do_remote_decode": True})
    assert metric(p, "vllm:external_prefix_cache_hits_total") == BLOCKS * profiles.BLOCK_SIZE
    assert metric(p, "vllm:external_prefix_cache_queries_total") == 2 * len(PROMPT.split())
    assert metric(p, "vllm:prefix_cache_hits_total") == 0
    assert metric(p, "simcluster:store_blocks_total", tier="mooncake", op="load") == BLOCKS
    assert warm < cold * 0.6, (cold, warm)
    assert metric(master_metrics, "master_key_count") == BLOCKS  # nothing new to back up

    # 3. A new prompt adds its blocks: the key count rises again.
    other = PROMPT.replace("w", "v")
    completion(p, prompt=other)
    wait_until(lambda: metric(master_metrics, "master_key_count") == 2 * BLOCKS, what="the second prompt's blocks")

    # 4. A Decode with consumer_is_to_load serves a prompt it gets without PD params (its local prefix cache does
    # not hold it) from the pool too, and puts nothing back.
    completion(d, prompt=other)
    assert metric(d, "simcluster:store_blocks_total", tier="mooncake", op="load") == BLOCKS
    assert metric(d, "vllm:external_prefix_cache_hits_total") == len(PROMPT.split()) + BLOCKS * profiles.BLOCK_SIZE
    assert metric(master_metrics, "master_key_count") == 2 * BLOCKS


@pytest.mark.procs
def test_an_engine_starts_about_as_fast_with_the_pool(spawn, state_root):
    """Measured, not modelled: the store client's start is the only extra cost."""
    master, _metrics = start_mooncake_master(spawn, SVC, state_root)
    config = write_mooncake_json(state_root / "mooncake.json", master)
    plain = {k: v for k, v in pool_kv_config("kv_producer", free_port(P_HOST), 0).items() if k != "kv_connector"}
    plain = plain["kv_connector_extra_config"]["connectors"][0]
    times = {"plain": [], "pool": []}
    for i in range(3):
        times["plain"].append(start_engine(spawn, state_root, P_HOST, {**plain, "kv_port": str(free_port(P_HOST))})[2])
        times["pool"].append(start_engine(spawn, state_root, D_HOST, pool_kv_config(
            "kv_producer", free_port(D_HOST), 10 + i), MOONCAKE_CONFIG_PATH=str(config))[2])
    print("engine start (s):", {k: [round(t, 2) for t in v] for k, v in times.items()})
    assert min(times["pool"]) < min(times["plain"]) + 3.0


# -- the memcache backend (a memcached ring stands in for MemCache) ----------------------------------------

def start_memcached(spawn, log_dir, n=2):
    servers = []
    for _ in range(n):
        port = free_port(SVC)
        spawn(["memcached", "-l", SVC, "-p", str(port), "-U", "0", "-m", "16", "-u", "root"], None,
              log_dir / f"mc-{port}.log")
        servers.append(f"{SVC}:{port}")
    for server in servers:
        host, port = server.split(":")
        wait_until(lambda h=host, p=int(port): _listening(h, p), what=f"memcached {server}")
    return servers


def _listening(host, port):
    import socket

    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def _items(server):
    import socket

    host, port = server.split(":")
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += s.recv(65536)
    return int(next(line.split()[2] for line in data.decode().splitlines() if line.startswith("STAT curr_items ")))


def mmc_local_conf(path, servers, replicas=None):
    meta = servers[0].split(":")[0]
    lines = [f"ock.mmc.meta_service_url = tcp://{meta}:5000", f"ock.mmc.local_service.config_store_url = "
             f"tcp://{meta}:6000", "ock.mmc.local_service.protocol = device_sdma",
             "ock.mmc.local_service.dram.size = 1GB", "ock.mmc.local_service.world_size = 256",
             "ock.mmc.log_level = info", f"simcluster.ring = {','.join(servers)}"]
    lines += [f"simcluster.replicas = {replicas}"] if replicas else []
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.procs
def test_prefills_share_the_memcache_pool_of_their_mmc_local_conf(spawn, state_root):
    servers = start_memcached(spawn, state_root)
    conf = mmc_local_conf(state_root / "mmc-local.conf", servers, replicas=3)  # capped at the ring's 2 servers
    env = {"MMC_LOCAL_CONFIG_PATH": conf, "SIMCLUSTER_TIME_SCALE": "1"}
    _p1, p1, _ = start_engine(spawn, state_root, P_HOST, pool_kv_config("kv_producer", free_port(P_HOST), 0,
                                                                        backend="memcache"), **env)
    _p2, p2, _ = start_engine(spawn, state_root, D_HOST, pool_kv_config("kv_producer", free_port(D_HOST), 1,
                                                                        backend="memcache"), **env)
    _, cold = completion(p1)
    wait_until(lambda: metric(p1, "simcluster:store_blocks_total", tier="memcache", op="backup") == BLOCKS,
               what="P1's backup")
    assert [_items(s) for s in servers] == [BLOCKS, BLOCKS]  # two replicas of every block
    _, warm = completion(p2)
    assert metric(p2, "vllm:external_prefix_cache_hits_total") == BLOCKS * profiles.BLOCK_SIZE
    assert warm < cold * 0.6, (cold, warm)
    # The same prompt on P1 again is a local prefix cache hit, and asks the pool only for what is beyond it.
    completion(p1)
    assert metric(p1, "vllm:prefix_cache_hits_total") == BLOCKS * profiles.BLOCK_SIZE
    assert metric(p1, "vllm:external_prefix_cache_hits_total") == 0


@pytest.mark.procs
def test_without_pythonhashseed_no_engine_finds_another_ones_blocks(spawn, state_root):
    """vLLM seeds its block hashes from PYTHONHASHSEED, or at random per process: the pool then never matches."""
    servers = start_memcached(spawn, state_root)
    env = {"MMC_LOCAL_CONFIG_PATH": mmc_local_conf(state_root / "mmc-local.conf", servers)}
    _p1, p1, _ = start_engine(spawn, state_root, P_HOST, pool_kv_config("kv_producer", free_port(P_HOST), 0,
                                                                        backend="memcache"), **env)
    _p2, p2, _ = start_engine(spawn, state_root, D_HOST, pool_kv_config("kv_producer", free_port(D_HOST), 1,
                                                                        backend="memcache"),
                              **env, PYTHONHASHSEED=None)
    completion(p1)
    wait_until(lambda: metric(p1, "simcluster:store_blocks_total", op="backup") == BLOCKS, what="P1's backup")
    completion(p2)
    assert metric(p2, "vllm:external_prefix_cache_queries_total") > 0
    assert metric(p2, "vllm:external_prefix_cache_hits_total") == 0
    logs = "".join(p.read_text() for p in state_root.glob(f"{D_HOST}-*.log"))
    assert "PYTHONHASHSEED is not set" in logs


@pytest.mark.procs
def test_two_instances_on_a_node_with_one_lookup_rpc_port_collide(spawn, state_root):
    servers = start_memcached(spawn, state_root, n=1)
    env = {"MMC_LOCAL_CONFIG_PATH": mmc_local_conf(state_root / "mmc-local.conf", servers)}
    host = "127.0.10.144"
    node = state_root / f"node-{host}"
    start_engine(spawn, state_root, host, pool_kv_config("kv_producer", free_port(host), 7, backend="memcache"), **env)
    argv = engine_argv(host, free_port(host), pool_kv_config("kv_consumer", free_port(host), 7, backend="memcache"))
    done = subprocess.run(argv, env=engine_env(state_root, host, **env), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"lookup socket ipc://{node}/lookup_rpc_port_7_dp_rank0 is in use" in done.stderr, done.stderr[-1500:]
    # Another port on the same node is fine.
    start_engine(spawn, state_root, host, pool_kv_config("kv_consumer", free_port(host), 8, backend="memcache"), **env)
    assert (node / "lookup_rpc_port_7_dp_rank0").is_socket() and (node / "lookup_rpc_port_8_dp_rank0").is_socket()


@pytest.mark.procs
def test_a_pool_load_failure_fails_the_request_or_recomputes_as_the_policy_says(spawn, state_root):
    """A block the pool reports but cannot deliver (its memcached lost it between lookup and load is played by
    corrupting it): `fail` answers 500 with finished_reason error, `recompute` computes from that block on."""
    from simcluster.ascendstore import AscendStore
    from simcluster.engine import textgen

    servers = start_memcached(spawn, state_root, n=1)
    env = {"MMC_LOCAL_CONFIG_PATH": mmc_local_conf(state_root / "mmc-local.conf", servers)}
    _p1, p1, _ = start_engine(spawn, state_root, P_HOST, pool_kv_config("kv_producer", free_port(P_HOST), 0,
                                                                        backend="memcache"), **env)
    completion(p1)
    wait_until(lambda: metric(p1, "simcluster:store_blocks_total", op="backup") == BLOCKS, what="P1's backup")
    hashes = textgen.block_hashes(MODEL, textgen.tokenize(PROMPT), profiles.BLOCK_SIZE, "0")
    store = AscendStore(servers, replicas=1)
    key = f"{MODEL}@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:default@{hashes[3]}"
    assert store.get(key) is not None
    store.put(key, b"garbage")
    failing = pool_kv_config("kv_producer", free_port(D_HOST), 1, backend="memcache")
    _p2, p2, _ = start_engine(spawn, state_root, D_HOST, failing, **env)
    with pytest.raises(urllib.error.HTTPError) as err:
        completion(p2)
    assert err.value.code == 500
    assert metric(p2, "vllm:request_success_total", finished_reason="error") == 1
    recompute = {**pool_kv_config("kv_producer", free_port("127.0.10.138"), 2, backend="memcache"),
                 "kv_load_failure_policy": "recompute"}
    _p3, p3, _ = start_engine(spawn, state_root, "127.0.10.138", recompute, **env)
    completion(p3)
    assert metric(p3, "vllm:external_prefix_cache_hits_total") == 3 * profiles.BLOCK_SIZE  # blocks 0-2 loaded
    assert metric(p3, "vllm:request_success_total", finished_reason="length") == 1
