"""Prefix-cache hit rate, TTFT and load spread of the Prefill routing policies, side by side in one run, on a
shared-prefix workload through real simulated engines (simcluster.engine, its prefix cache and cost model).

Three Prefill engines and one Decode (TP1 each) behind pdproxy. The workload: one system prompt every request
shares, one of --docs documents after it (a RAG or few-shot shape), then a question of its own; --rounds rounds,
each asking every document once in a shuffled order (the same order for every policy), --concurrency at a time.
For each policy a fresh set of engines (empty caches) and a fresh proxy:
- cache_aware (the Prefill role; the Decode least_conn), with its approximate view alone
- cache_aware (kv events): the same, the engines publishing their KV cache events (--kv-events-config) and the
  proxy reading them (--kv-events, --tokenizer: the simulated model's tokenizer directory, built here)
- consistent_hash on the prompt's first --prefix-chars characters (default 256, the proxy's default), and on the
  first 4096 (system prompt and document: hashing tuned to this workload)
- least_conn and round_robin
Prints per policy: the Prefill engines' prefix-cache hit rate (vllm:prefix_cache_hits / queries, tokens), TTFT
p50/p90 (first streamed byte at the client), requests per Prefill and the spread (max / mean), and the proxy's
CPU per request (utime + stime from /proc over the run).

The workload's words are all known to the simulated tokenizer (simcluster/tokenizer_dir.py): its ids equal the
engine's for the words it knows, and a block holding a word it does not know never matches an event.

    .venv/bin/python bench/proxy/cache_aware.py              # under a minute
    .venv/bin/python bench/proxy/cache_aware.py --proxies 2  # two proxies over the same engines, requests alternating
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PY = sys.executable
MODEL = "sim-model"
KV_EVENTS = "cache_aware (kv events)"
POLICIES = [
    ("cache_aware", ["--prefill-policy", "cache_aware", "--decode-policy", "least_conn"]),
    (KV_EVENTS, ["--prefill-policy", "cache_aware", "--decode-policy", "least_conn"]),
    ("consistent_hash prefix 256", ["--policy", "consistent_hash", "--hash-key", "prefix", "--prefix-chars", "256"]),
    ("consistent_hash prefix 4096", ["--policy", "consistent_hash", "--hash-key", "prefix", "--prefix-chars",
                                     "4096"]),
    ("least_conn", ["--policy", "least_conn"]),
    ("round_robin", ["--policy", "round_robin"]),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, port, path, body=None, timeout=60.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def start_engine(role: str, time_scale: str, procs: list, events_port: int | None = None) -> int:
    port, kv_port = free_port(), free_port()
    events = ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{events_port}"})
              ] if events_port else []
    kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
          "kv_port": str(kv_port), "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1},
                                                                 "decode": {"dp_size": 1, "tp_size": 1}}}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ASCEND_RT_VISIBLE_DEVICES": "0", "SIMCLUSTER_STARTUP_S": "0.1",
           "SIMCLUSTER_TIME_SCALE": time_scale}
    procs.append(subprocess.Popen([PY, "-m", "simcluster.engine", "serve", MODEL, "--host", "127.0.0.1", "--port",
                                   str(port), "-tp", "1", "--served-model-name", MODEL,
                                   "--kv-transfer-config", json.dumps(kv), *events],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
                                  start_new_session=True))
    return port


def wait_healthy(port: int, path: str = "/health", timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if request("GET", port, path, timeout=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"nothing healthy on port {port}{path}")


def counter(port: int, name: str) -> float:
    _, raw = request("GET", port, "/metrics")
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}_total\{{[^}}]*\}} (\S+)$", raw.decode(), re.M))


def workload(docs: int, rounds: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    system = ("The assistant of the ascend npu system has the answer for the user: Look at the cache first, and the "
              "batch and the stream. ") * 8  # ~1,000 characters
    bodies = [f"Set {d}: " + " ".join(f"block-{d}-{k} is in the cache of die {k % 16}." for k in range(90))
              for d in range(docs)]  # ~4,000 characters each
    prompts = []
    for r in range(rounds):
        order = list(range(docs))
        rng.shuffle(order)
        prompts += [f"{system}\n{bodies[d]}\nFind the first block of Set {d}, problem {r}." for d in order]
    from simcluster.engine.textgen import token_texts
    from simcluster.tokenizer_dir import token_ids

    unknown = {w for p in prompts for w in token_texts(p)} - token_ids().keys()
    assert not unknown, f"words the simulated tokenizer does not know: {sorted(unknown)[:10]}"
    return prompts


def build_tokenizer(dest: str) -> str:
    subprocess.run([PY, "-m", "simcluster.tokenizer_dir", dest], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return dest


def tree_cpu_seconds(pid: int) -> float:
    """The process's CPU and its children's (a proxy with --workers N)."""
    pids = [pid] + [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    return sum(cpu_seconds(p) for p in pids)


def cpu_seconds(pid: int) -> float:
    """CPU time the process's threads have run (schedstat, nanoseconds: finer than stat's clock ticks)."""
    return sum(int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
               for t in os.listdir(f"/proc/{pid}/task")) / 1e9


def ttft(port: int, prompt: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 2,
                                                                  "stream": True}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read1(1)
        first = time.perf_counter() - t0
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
        return first
    finally:
        conn.close()


def run_policy(name: str, flags: list[str], prompts: list[str], concurrency: int, time_scale: str,
               tokenizer: str, n_proxies: int = 1, workers: int = 1) -> dict:
    procs: list[subprocess.Popen] = []
    try:
        events = [free_port() for _ in range(3)] if name == KV_EVENTS else [None] * 3
        prefills = [start_engine("prefill", time_scale, procs, events[i]) for i in range(3)]
        if name == KV_EVENTS:
            flags = [*flags, "--tokenizer", tokenizer, "--kv-events",
                     *[f"127.0.0.1:{p}=tcp://127.0.0.1:{e}" for p, e in zip(prefills, events, strict=True)]]
        decode = start_engine("decode", time_scale, procs)
        for port in (*prefills, decode):
            wait_healthy(port)
        proxy_ports, proxies = [free_port() for _ in range(n_proxies)], []
        for port in proxy_ports:
            proxies.append(subprocess.Popen(
                [PY, "-m", "pdproxy", "--host", "127.0.0.1", "--port", str(port), "--prefill",
                 *[f"127.0.0.1:{p}" for p in prefills], "--decode", f"127.0.0.1:{decode}", "--log-level", "WARNING",
                 "--workers", str(workers), *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)}))
            procs.append(proxies[-1])
            wait_healthy(port, "/healthcheck")
        before = {p: (counter(p, "vllm:prefix_cache_queries"), counter(p, "vllm:prefix_cache_hits"),
                      counter(p, "vllm:request_success")) for p in prefills}
        time.sleep(0.5)  # the subscribers connect
        cpu0 = sum(tree_cpu_seconds(p.pid) for p in proxies)
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:  # clients take turns over the proxies
            ttfts = list(pool.map(lambda ip: ttft(proxy_ports[ip[0] % n_proxies], ip[1]), enumerate(prompts)))
        cpu_ms = 1000 * (sum(tree_cpu_seconds(p.pid) for p in proxies) - cpu0) / len(prompts)
        queries = hits = 0.0
        per_prefill = []
        for p in prefills:
            q0, h0, n0 = before[p]
            queries += counter(p, "vllm:prefix_cache_queries") - q0
            hits += counter(p, "vllm:prefix_cache_hits") - h0
            per_prefill.append(int(counter(p, "vllm:request_success") - n0))
        ttfts.sort()
        return {"policy": name, "hit_rate": hits / queries if queries else 0.0,
                "ttft_p50_ms": 1000 * statistics.median(ttfts), "ttft_p90_ms": 1000 * ttfts[int(0.9 * len(ttfts))],
                "per_prefill": per_prefill, "spread": max(per_prefill) / (sum(per_prefill) / len(per_prefill)),
                "cpu_ms": cpu_ms}
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--time-scale", default="0.2", help="SIMCLUSTER_TIME_SCALE of the engines")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--proxies", type=int, default=1, help="proxy processes over the same engines, each a view of its "
                    "own; the clients' requests take turns over them (default 1)")
    ap.add_argument("--workers", type=int, default=1, help="pdproxy --workers of each proxy (default 1)")
    args = ap.parse_args()
    prompts = workload(args.docs, args.rounds, args.seed)
    print(f"# {len(prompts)} requests ({args.docs} documents x {args.rounds} rounds, one shared system prompt), "
          f"concurrency {args.concurrency}, 3 Prefill + 1 Decode simulated engines, time scale {args.time_scale}, "
          f"{args.proxies} proxy process(es) of {args.workers} worker(s)")
    print(f"{'policy':30s} | hit rate | TTFT p50 ms | TTFT p90 ms | requests per Prefill | max/mean | proxy CPU ms/req")
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(tmp)
        for name, flags in POLICIES:
            r = run_policy(name, flags, prompts, args.concurrency, args.time_scale, tokenizer, args.proxies,
                           args.workers)
            rows.append(r)
            print(f"{name:30s} | {r['hit_rate']:8.1%} | {r['ttft_p50_ms']:11.1f} | {r['ttft_p90_ms']:11.1f} | "
                  f"{str(r['per_prefill']):20s} | {r['spread']:8.2f} | {r['cpu_ms']:.3f}", flush=True)
    base = {r["policy"]: r for r in rows}
    ca = base["cache_aware"]
    for other in (KV_EVENTS, "consistent_hash prefix 256", "consistent_hash prefix 4096", "least_conn"):
        o = base[other]
        print(f"# cache_aware vs {other}: hit rate {ca['hit_rate']:.1%} vs {o['hit_rate']:.1%}, "
              f"TTFT p50 x{ca['ttft_p50_ms'] / o['ttft_p50_ms']:.2f}, spread {ca['spread']:.2f} vs {o['spread']:.2f}")
    print(f"# took {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
