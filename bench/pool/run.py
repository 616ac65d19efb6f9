"""Time to first token of a Prefill on the simulated engine: cold, from the KV pool, from the local prefix cache.

A real mooncake_master and two Prefill engines (simcluster/engine) with the MultiConnector the control plane renders
(MooncakeConnectorV1 + AscendStoreConnector, mooncake.json as docs/ascend-pd-launch-facts.md §3.2; set up as
tests/simcluster/test_pool_connectors.py does), deepseek-r1 at SIMCLUSTER_TIME_SCALE=1 (the cost model's real
speed). Each round, for each prompt size, with a prompt no engine has seen and the Prefills' roles swapped every
round (A computes, B reads the pool), interleaved:
  cold   A prefills the prompt (A asks the pool, which has nothing);
         then, untimed, the master's key count must show A's backup of the prompt's full blocks;
  pool   B, which has never seen the prompt, prefills it: the full blocks are loaded from the pool (A's segment),
         only the tail (< 128 tokens) is computed;
  local  A prefills the same prompt again: its local prefix cache holds the full blocks.
Every request is the proxy's Prefill leg (pdproxy.leg_bodies.prefill_body: max_tokens 1, stream false,
kv_transfer_params {"do_remote_decode": true, ...}); TTFT = time to the full non-streamed response. Each request's
reuse is checked in the engines' metrics (pool hits / local prefix hits = the full blocks), never its time.
Then engine start (Popen to /health answering, SIMCLUSTER_STARTUP_S=0) with MooncakeConnectorV1 alone and with the
pool, interleaved, on a fifth address.

Run as root from the repo root (the store clients live in a user + network namespace, simcluster/kvpool.py):
  .venv/bin/python bench/pool/run.py [--rounds 10] [--sizes 1000 4000] [--tp 1] [--json out.json]
Addresses 127.0.10.236 (master), .237 / .238 (Prefills), .239 (start-time engines). Every process is started
here, dies with this one (PR_SET_PDEATHSIG) and is stopped by PID at the end, also on Ctrl-C or an error.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pdproxy.leg_bodies import prefill_body  # noqa: E402
from simcluster import profiles  # noqa: E402
from simcluster.kvpool import die_with_parent  # noqa: E402

MASTER_HOST, PREFILL_HOSTS, START_HOST = "127.0.10.236", ("127.0.10.237", "127.0.10.238"), "127.0.10.239"
MODEL, SERVED = "/models/ds_r1", "ds_r1"
TMP = Path(tempfile.mkdtemp(prefix="pdcp-bench-pool-", dir="/tmp"))
PROCS: list[subprocess.Popen] = []


# -- processes ---------------------------------------------------------------------------------------------------

def free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def spawn(argv: list[str], env: dict | None, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=die_with_parent, start_new_session=True)
    PROCS.append(proc)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
    if proc in PROCS:
        PROCS.remove(proc)


def stop_all() -> None:
    for proc in reversed(list(PROCS)):
        try:
            stop(proc)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"could not stop pid {proc.pid}: {exc}", file=sys.stderr)


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, poll: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"process {proc.pid} exited with {proc.returncode} before {url} answered "
                             f"(logs in {TMP}, kept)")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(poll)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


def wait_until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} not reached within {timeout:.0f} s")
        time.sleep(0.02)


def metric(url: str, name: str, **labels) -> float:
    """Sum of a metric's samples whose labels match (url: an engine's base URL or a full /metrics URL)."""
    with urllib.request.urlopen(url if url.endswith("/metrics") else url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and \
                all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_master() -> tuple[str, str]:
    """A real mooncake_master with the flags the deployment renders (as tests/simcluster/simtest_helpers.py)."""
    rpc, metrics_port = free_port(MASTER_HOST), free_port(MASTER_HOST)
    proc = spawn([sys.executable, str(Path(sys.executable).parent / "mooncake_master"), "--port", str(rpc),
                  "--rpc_address", MASTER_HOST, "--metrics_host", MASTER_HOST, "--metrics_port", str(metrics_port),
                  "--default_kv_lease_ttl", "5000", "--client_ttl", "10", "--logtostderr=true"],
                 None, TMP / f"mooncake-master-{rpc}.log")
    url = f"http://{MASTER_HOST}:{metrics_port}/metrics"
    wait_http(url, timeout=15, proc=proc, poll=0.05)
    return f"{MASTER_HOST}:{rpc}", url


def write_mooncake_json(master: str) -> Path:
    path = TMP / "mooncake.json"
    path.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
                                "master_server_address": master, "global_segment_size": "1GB",
                                "preferred_segment": False, "prefer_alloc_in_same_node": True}))
    return path


def p2p_config(kv_port: int, tp: int) -> dict:
    return {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": str(kv_port),
            "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": tp},
                                          "decode": {"dp_size": 1, "tp_size": 1}}}


def pool_config(kv_port: int, lookup_rpc_port: int, tp: int) -> dict:
    """MultiConnector = MooncakeConnectorV1 + AscendStoreConnector, as the control plane renders a Prefill's."""
    store = {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
             "kv_connector_extra_config": {"backend": "mooncake", "lookup_rpc_port": str(lookup_rpc_port)}}
    return {"kv_connector": "MultiConnector", "kv_role": "kv_producer",
            "kv_connector_extra_config": {"connectors": [p2p_config(kv_port, tp), store]}}


def engine_env(host: str, mooncake_json: Path) -> dict:
    """The simulator's env (tests/simcluster/simtest_helpers.py sim_env + test_pool_connectors.py engine_env): no
    inherited SIMCLUSTER_/ASCEND_RT_/MOONCAKE_/MMC_ variables, real speed, a shared PYTHONHASHSEED (else no engine
    finds another's blocks), a node dir per host for the lookup sockets, a pool dir of our own."""
    node = TMP / f"node-{host}"
    node.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMCLUSTER_", "ASCEND_RT_", "MOONCAKE_", "MMC_"))}
    env.update({"PYTHONPATH": str(REPO), "SIMCLUSTER_TIME_SCALE": "1", "SIMCLUSTER_STARTUP_S": "0",
                "PYTHONHASHSEED": "0", "SIMCLUSTER_NODE_DIR": str(node), "SIMCLUSTER_KVPOOL_DIR": str(TMP / "kvpool"),
                "MOONCAKE_CONFIG_PATH": str(mooncake_json)})
    return env


def start_engine(host: str, kv: dict, tp: int, mooncake_json: Path) -> tuple[subprocess.Popen, str, float]:
    """(process, base URL, seconds from Popen to /health answering)."""
    port = free_port(host)
    argv = [sys.executable, "-m", "simcluster.engine", "serve", MODEL, "--host", host, "--port", str(port),
            "--served-model-name", SERVED, "-tp", str(tp), "--kv-transfer-config", json.dumps(kv)]
    t0 = time.perf_counter()
    proc = spawn(argv, engine_env(host, mooncake_json), TMP / f"engine-{host}-{port}.log")
    base = f"http://{host}:{port}"
    wait_http(base + "/health", timeout=60, proc=proc)
    return proc, base, time.perf_counter() - t0


# -- requests ----------------------------------------------------------------------------------------------------

def prompt(tag: str, tokens: int) -> str:
    """One simulated token per word (simcluster/engine/textgen.py); the tag makes the first block, hence every
    block hash of the chain, new."""
    return " ".join(f"{tag}w{i}" for i in range(tokens))


def prefill(base: str, text: str) -> float:
    """The proxy's Prefill leg; seconds to the full non-streamed response."""
    host, port = base.removeprefix("http://").split(":")
    body = prefill_body({"model": SERVED, "prompt": text})
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        seconds = time.perf_counter() - t0
    finally:
        conn.close()
    if resp.status != 200 or "kv_transfer_params" not in json.loads(data):
        raise SystemExit(f"prefill on {base} answered {resp.status}: {data[:500]!r}")
    return seconds


def reuse(base: str) -> tuple[float, float]:
    """(tokens loaded from the pool, tokens found in the local prefix cache) so far."""
    return metric(base, "vllm:external_prefix_cache_hits_total"), metric(base, "vllm:prefix_cache_hits_total")


def timed(base: str, text: str, *, pool: int, local: int) -> float:
    """A prefill whose reuse must be exactly `pool` tokens from the pool and `local` from the local prefix cache."""
    before = reuse(base)
    seconds = prefill(base, text)
    after = reuse(base)
    got = (after[0] - before[0], after[1] - before[1])
    if got != (pool, local):
        raise SystemExit(f"{base}: expected {pool} pool / {local} local tokens, got {got[0]:.0f} / {got[1]:.0f}")
    return seconds


def one_round(engines: list[str], master_metrics: str, tag: str, size: int, times: dict) -> None:
    a, b = engines
    text = prompt(tag, size)
    full = size // profiles.BLOCK_SIZE
    keys = metric(master_metrics, "master_key_count")
    times["cold", size].append(timed(a, text, pool=0, local=0))
    wait_until(lambda: metric(master_metrics, "master_key_count") >= keys + full,
               what=f"the backup of {full} blocks in the master's key count")
    times["pool", size].append(timed(b, text, pool=full * profiles.BLOCK_SIZE, local=0))
    times["local", size].append(timed(a, text, pool=0, local=full * profiles.BLOCK_SIZE))


# -- the bench ---------------------------------------------------------------------------------------------------

def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def modelled(variant: str, size: int, tp: int) -> float:
    """The engine's simulated compute for the variant (simcluster/profiles.py at time scale 1); the rest of a
    measured TTFT is real work: HTTP, and for the pool the store client's lookup and read of the blocks."""
    p = profiles.profile_for(MODEL)
    reused = 0 if variant == "cold" else size // profiles.BLOCK_SIZE * profiles.BLOCK_SIZE
    load = reused * p.load_s_per_token if variant == "pool" else 0.0
    return p.prefill_fixed_s + (size - reused) * p.prefill_s_per_token_tp1 / tp ** 0.85 + load


def rows(times: dict, sizes: list[int], tp: int) -> list[dict]:
    out = []
    for size in sizes:
        cold = statistics.median(times["cold", size])
        for variant in ("cold", "pool", "local"):
            values = times[variant, size]
            med = statistics.median(values)
            out.append({"variant": variant, "size": size, "median_s": med, "p90_s": p90(values),
                        "ratio_to_cold": med / cold, "modelled_s": modelled(variant, size, tp), "samples_s": values})
    return out


def start_rows(starts: dict) -> list[dict]:
    plain = statistics.median(starts["no pool"])
    return [{"variant": f"start, {k}", "size": None, "median_s": statistics.median(v), "p90_s": p90(v),
             "ratio_to_no_pool": statistics.median(v) / plain, "samples_s": v} for k, v in starts.items()]


def print_table(ttft: list[dict], starts: list[dict]) -> None:
    print(f"{'variant':<16} {'size':>5} {'median s':>9} {'p90 s':>8} {'ratio':>7}  {'modelled s':>10}")
    for row in ttft:
        print(f"{row['variant']:<16} {row['size']:>5} {row['median_s']:9.3f} {row['p90_s']:8.3f} "
              f"{row['ratio_to_cold']:6.2f}x  {row['modelled_s']:10.3f}")
    for row in starts:
        print(f"{row['variant']:<16} {'-':>5} {row['median_s']:9.3f} {row['p90_s']:8.3f} "
              f"{row['ratio_to_no_pool']:6.2f}x")


def interrupted(*_) -> None:
    raise KeyboardInterrupt  # SIGTERM: stop everything in `finally`, as on Ctrl-C


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of every variant (default 10)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000], help="prompt tokens (default 1000 4000)")
    parser.add_argument("--tp", type=int, default=1, help="the Prefills' TP (default 1, as the simcluster tests)")
    parser.add_argument("--json", type=Path, help="also write the table (and every sample) here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the Mooncake store clients need a user + network namespace)")
    signal.signal(signal.SIGTERM, interrupted)
    TMP.chmod(0o755)
    keep = False
    try:
        load = os.getloadavg()[0]
        master, master_metrics = start_master()
        mooncake_json = write_mooncake_json(master)
        engines, first_starts = [], []
        for i, host in enumerate(PREFILL_HOSTS):
            _proc, base, took = start_engine(host, pool_config(free_port(host), i, args.tp), args.tp, mooncake_json)
            engines.append(base)
            first_starts.append(took)

        # Untimed warm-up of both paths in both directions (first connections, the agents' first transfers).
        for r in range(2):
            one_round(engines[r:] + engines[:r], master_metrics, f"warm{r}", 3 * profiles.BLOCK_SIZE + 10,
                      defaultdict(list))
        times = {(v, s): [] for v in ("cold", "pool", "local") for s in args.sizes}
        t0 = time.perf_counter()
        for r in range(args.rounds):
            pair = engines if r % 2 == 0 else engines[::-1]
            for size in (args.sizes if r % 2 == 0 else args.sizes[::-1]):
                one_round(pair, master_metrics, f"r{r}s{size}", size, times)
        ttft_s = time.perf_counter() - t0

        starts: dict[str, list[float]] = {"no pool": [], "pool": []}
        for r in range(args.rounds):
            for kind in (("no pool", "pool") if r % 2 == 0 else ("pool", "no pool")):
                kv_port = free_port(START_HOST)
                kv = p2p_config(kv_port, args.tp) if kind == "no pool" else pool_config(kv_port, 10 + r, args.tp)
                proc, _base, took = start_engine(START_HOST, kv, args.tp, mooncake_json)
                starts[kind].append(took)
                stop(proc)

        ttft, start = rows(times, args.sizes, args.tp), start_rows(starts)
        print(f"Prefill TTFT on the simulated engine (deepseek-r1, TP{args.tp}, SIMCLUSTER_TIME_SCALE=1, real "
              f"mooncake_master, prefer_alloc_in_same_node), {args.rounds} rounds interleaved in {ttft_s:.0f} s; "
              f"load {load:.2f} -> {os.getloadavg()[0]:.2f}")
        print_table(ttft, start)
        print("ratio: median / the cold median of the same size (start: / the median start without the pool); "
              "modelled: the cost model's compute alone")
        print(f"engine start (Popen -> /health, SIMCLUSTER_STARTUP_S=0) of the two bench Prefills with the pool: "
              f"{first_starts[0]:.3f} s (first store client: creates the namespace), {first_starts[1]:.3f} s")
        if args.json:
            args.json.write_text(json.dumps({
                "settings": {"rounds": args.rounds, "sizes": args.sizes, "tp": args.tp, "model": "deepseek-r1",
                             "time_scale": 1, "load_before": load, "load_after": os.getloadavg()[0]},
                "ttft": ttft, "start": start, "bench_prefill_starts_s": first_starts}, indent=2) + "\n")
            print(f"wrote {args.json}")
    except BaseException as exc:
        keep = not isinstance(exc, KeyboardInterrupt)  # the engines' and the master's logs, for a failure
        raise
    finally:
        stop_all()
        if keep:
            print(f"logs kept in {TMP}", file=sys.stderr)
        else:
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
