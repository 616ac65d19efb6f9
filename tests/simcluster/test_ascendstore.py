"""AscendStore on three real memcached servers: 3 replicas survive a lost server; a Prefill reuses a prefix."""

import json
import sys
import time

from simtest_helpers import free_port, sim_env, wait_http

from simcluster.ascendstore import AscendStore

HOST = "127.0.10.115"


def start_memcached(spawn, tmp, n=3):
    servers = []
    for _ in range(n):
        port = free_port(HOST)
        proc = spawn(["memcached", "-l", HOST, "-p", str(port), "-U", "0", "-m", "16", "-u", "root"], None,
                     tmp / f"mc-{port}.log")
        servers.append((f"{HOST}:{port}", proc))
    time.sleep(0.3)
    return servers


def test_losing_one_server_loses_no_block(spawn, state_root):
    servers = start_memcached(spawn, state_root)
    store = AscendStore([s for s, _ in servers], replicas=3)
    blocks = {f"blk{i}": bytes([i]) * 1000 for i in range(60)}
    assert all(store.put(k, v) == 3 for k, v in blocks.items())
    servers[1][1].kill()
    servers[1][1].wait(5)
    assert all(store.get(k) == v for k, v in blocks.items())
    assert store.put("after", b"x") == 2


def test_placement_uses_distinct_servers_and_spreads_primaries(spawn, state_root):
    store = AscendStore([f"{HOST}:{p}" for p in (1, 2, 3, 4)], replicas=3)
    placements = [store.placement(f"k{i}") for i in range(400)]
    assert all(len(set(p)) == 3 for p in placements)
    primaries = {p[0] for p in placements}
    assert len(primaries) == 4


def test_prefill_loads_a_known_prefix_instead_of_recomputing(spawn, state_root):
    servers = start_memcached(spawn, state_root)
    port = free_port(HOST)
    kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": str(free_port(HOST)),
          "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}}
    env = sim_env(SIMCLUSTER_ASCENDSTORE=",".join(s for s, _ in servers), SIMCLUSTER_TIME_SCALE="1")
    proc = spawn([sys.executable, "-m", "simcluster.engine", "serve", "m", "--host", HOST, "--port", str(port),
                  "--kv-transfer-config", json.dumps(kv)], env, state_root / "p.log")
    base = f"http://{HOST}:{port}"
    wait_http(base + "/health", proc=proc)
    import urllib.request

    def ttft():
        body = json.dumps({"model": "m", "prompt": " ".join(f"t{i}" for i in range(2048)), "max_tokens": 1})
        t0 = time.monotonic()
        urllib.request.urlopen(urllib.request.Request(base + "/v1/completions", body.encode(),
                                                      {"Content-Type": "application/json"}), timeout=20).read()
        return time.monotonic() - t0

    cold = ttft()
    time.sleep(0.5)  # the backup is asynchronous
    warm = ttft()
    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    hits = [line for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits_total")]
    assert float(hits[0].rsplit(" ", 1)[1]) == 2048
    assert warm < cold * 0.7, (cold, warm)
