"""Recovery by request id through the KV pool, on real processes: two Prefills and a Decode behind pdproxy, sharing
a real mooncake_master. A Prefill is SIGKILLed right after its leg (it answered, its backup is in the pool, the
Decode has not pulled yet); the Decode's pull fails, it answers 500, the proxy prefills again (`<id>-r1`) on the
other Prefill, which finds the prompt's blocks in the pool or not, depending on where Mooncake placed them.

Addresses: 127.0.10.135 (master), .146 / .147 Prefills, .148 Decode, .149 proxy.
"""

import http.client
import json
import os
import signal
import sys
import threading
import time

import pytest

from simcluster import profiles
from tests.simcluster.simtest_helpers import (
    free_port,
    metric,
    pool_kv_config,
    start_mooncake_master,
    wait_http,
    wait_until,
)
from tests.simcluster.test_pool_connectors import engine_env, start_engine

pytestmark = pytest.mark.procs  # every test here starts processes or servers

SVC, P_HOSTS, D_HOST, PROXY_HOST = "127.0.10.135", ("127.0.10.146", "127.0.10.147"), "127.0.10.148", "127.0.10.149"
BLOCKS = 8
N_TOKENS = BLOCKS * profiles.BLOCK_SIZE + 20


def prompt(word):
    return " ".join(f"{word}{i}" for i in range(N_TOKENS))


def start_proxy(spawn, log_dir, prefills, decodes):
    log = log_dir / "proxy.log"
    spawn([sys.executable, "-m", "pdproxy", "--host", PROXY_HOST, "--port", "0", "--prefill", *prefills,
           "--decode", *decodes, "--health-interval", "30"], engine_env(log_dir, PROXY_HOST), log)
    line = []
    wait_until(lambda: line.extend(x for x in log.read_text().splitlines() if "pdproxy listening on" in x) or line,
               timeout=20, what="the proxy")
    base = line[0].split("listening on ", 1)[1].strip()
    wait_http(base + "/health")
    return base


def stream_ttft(base, text, out):
    """Stream a completion through the proxy; out gets ttft (first data event), status, text and the request id."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps({"model": "ds_r1", "prompt": text, "max_tokens": 4,
                                                         "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out.update(status=resp.status, rid=resp.getheader("X-Request-Id"), text="")
    while line := resp.readline():
        if line.startswith(b"data:") and b"[DONE]" not in line:
            out.setdefault("ttft", time.monotonic() - t0)
            choice = (json.loads(line[5:]).get("choices") or [{}])[0]
            out["text"] += choice.get("text") or ""
    out["total"] = time.monotonic() - t0
    conn.close()


def engine_ttft_sum(base):
    return metric(base, "vllm:time_to_first_token_seconds_sum")


CASES = [(True, "recompute"), (True, "fail"), (False, "recompute")]


@pytest.mark.parametrize("same_node,policy", CASES, ids=["same-node-recompute", "same-node-fail", "anywhere-recompute"])
def test_a_prefill_killed_after_its_leg_is_recovered_by_request_id(spawn, state_root, same_node, policy):
    master, master_metrics = start_mooncake_master(spawn, SVC, state_root)
    config = state_root / "mooncake.json"
    config.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
                                  "master_server_address": master, "global_segment_size": "1GB",
                                  "preferred_segment": False, "prefer_alloc_in_same_node": same_node}))
    env = {"MOONCAKE_CONFIG_PATH": str(config), "SIMCLUSTER_TIME_SCALE": "1"}
    prefills = []
    for i, host in enumerate(P_HOSTS):
        kv = {**pool_kv_config("kv_producer", free_port(host), i), "kv_load_failure_policy": policy}
        proc, base, _ = start_engine(spawn, state_root, host, kv, "--no-enable-prefix-caching", **env)
        prefills.append((proc, base))
    d_proc, d, _ = start_engine(spawn, state_root, D_HOST, pool_kv_config("kv_consumer", free_port(D_HOST), 9), **env)
    proxy = start_proxy(spawn, state_root, [b.removeprefix("http://") for _, b in prefills], [d.removeprefix("http://")])

    # A cold prefill of another prompt of the same length, through the same path, as the yardstick.
    cold = {}
    before = {b: engine_ttft_sum(b) for _, b in prefills}
    stream_ttft(proxy, prompt("c"), cold)
    cold_engine = sum(engine_ttft_sum(b) - before[b] for _, b in prefills)
    assert cold["status"] == 200
    wait_until(lambda: metric(master_metrics, "master_key_count") == BLOCKS, what="the cold prompt's backup")

    # The demo request: the Decode is stopped so it cannot pull before the Prefill dies.
    os.kill(d_proc.pid, signal.SIGSTOP)
    demo, backups = {}, {b: metric(b, "simcluster:store_blocks_total", op="backup") for _, b in prefills}
    worker = threading.Thread(target=stream_ttft, args=(proxy, prompt("a"), demo))
    worker.start()
    try:
        def victim():
            for proc, base in prefills:
                if metric(base, "simcluster:kv_held_requests") == 1 and \
                        metric(base, "simcluster:store_blocks_total", op="backup") == backups[base] + BLOCKS:
                    return proc, base
            return None
        wait_until(victim, timeout=20, what="a Prefill that answered and backed the prompt up")
        (dead, dead_base) = victim()
        (_, survivor) = next(p for p in prefills if p[1] != dead_base)
        before = engine_ttft_sum(survivor)
        hits_before = metric(survivor, "vllm:external_prefix_cache_hits_total")
        dead.send_signal(signal.SIGKILL)
        dead.wait(5)
    finally:
        os.kill(d_proc.pid, signal.SIGCONT)
    worker.join(60)
    hits = metric(survivor, "vllm:external_prefix_cache_hits_total") - hits_before
    survivor_ttft = engine_ttft_sum(survivor) - before
    print(f"\n[{'same node' if same_node else 'anywhere'}, {policy}] status {demo['status']}; cold: client TTFT "
          f"{cold['ttft']:.3f} s, prefill {cold_engine:.3f} s; recovered ({demo['rid']}-r1): client TTFT "
          f"{demo.get('ttft', float('nan')):.3f} s, survivor prefill {survivor_ttft:.3f} s, pool hits {hits:.0f} "
          f"of {N_TOKENS} tokens")
    if policy == "fail":
        # The master still lists the dead Prefill's blocks (until its client_ttl runs out): the survivor's lookup
        # finds them, its load fails, `fail` fails the re-prefill, and no Prefill is left for the proxy.
        assert demo["status"] >= 500
        return
    assert demo["status"] == 200 and demo["text"], demo
    profile = profiles.profile_for("/models/ds_r1")
    expected = profiles.prefill_seconds(profile, N_TOKENS - hits, 1) + profiles.load_seconds(profile, hits)
    assert survivor_ttft == pytest.approx(expected, abs=0.1)
    if same_node:
        # prefer_alloc_in_same_node (the docs' mooncake.json): the Prefill's backup sat in its own segment and died
        # with it; the re-prefill recomputes everything, as slow as a cold prefill.
        assert hits == 0 and survivor_ttft == pytest.approx(cold_engine, rel=0.05)
    else:
        # Placed anywhere: the leading blocks outside the dead Prefill's segment are loaded.
        assert hits % profiles.BLOCK_SIZE == 0 and 0 <= hits <= BLOCKS * profiles.BLOCK_SIZE
