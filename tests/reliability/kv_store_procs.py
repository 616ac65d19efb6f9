"""Real processes for the KV store fault cases: memcached, mooncake_master (restartable on the same ports),
simcluster engines with an AscendStoreConnector pool, and pdproxy, each started here and stopped by PID.

The engines read the connector config the control plane renders (docs/contracts.md §3): a MultiConnector of
MooncakeConnectorV1 and AscendStoreConnector, PYTHONHASHSEED=0, mooncake.json or mmc-local.conf.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from apps.deployments.topology.plan_warnings import MOONCAKE_CLIENT_TTL_S
from simcluster import profiles
from simcluster.engine import textgen
from tests.reliability.stack_procs import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
MODEL = "/models/ds_r1"
SERVED = "ds_r1"
KEY_PREFIX = f"{MODEL}@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:default@"


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def metric(url: str, name: str, **labels) -> float:
    """Sum of a metric's samples at url (a base URL, or a full /metrics URL) whose labels match."""
    text = urllib.request.urlopen(url if url.endswith("/metrics") else url + "/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def prompt(word: str, blocks: int) -> str:
    """`blocks` full KV blocks of distinct words (a token per word) and a short tail."""
    return " ".join(f"{word}{i}" for i in range(blocks * profiles.BLOCK_SIZE + 5))


def block_keys(text: str) -> list[str]:
    """The pool keys of the prompt's full blocks, in chain order, as the engines name them (PYTHONHASHSEED=0)."""
    hashes = textgen.block_hashes(MODEL, textgen.tokenize(text), profiles.BLOCK_SIZE, "0")
    return [KEY_PREFIX + h for h in hashes]


def pool_kv_config(role: str, kv_port: int, lookup_rpc_port: int, backend: str) -> dict:
    p2p = {"kv_connector": "MooncakeConnectorV1", "kv_role": role, "kv_port": str(kv_port),
           "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1},
                                         "decode": {"dp_size": 1, "tp_size": 1}}}
    store = {"kv_connector": "AscendStoreConnector", "kv_role": role,
             "kv_connector_extra_config": {"backend": backend, "lookup_rpc_port": str(lookup_rpc_port)}}
    return {"kv_connector": "MultiConnector", "kv_role": role,
            "kv_connector_extra_config": {"connectors": [p2p, store]}}


def write_mooncake_json(path: Path, master: str) -> Path:
    path.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
                                "master_server_address": master, "global_segment_size": "1GB",
                                "preferred_segment": False, "prefer_alloc_in_same_node": True}))
    return path


def write_mmc_local_conf(path: Path, servers: list[str], replicas: int) -> Path:
    """What the sim profile renders: MemCache's keys plus the memcached ring that plays its pool."""
    meta = servers[0].split(":")[0]
    path.write_text(f"ock.mmc.meta_service_url = tcp://{meta}:5000\nock.mmc.local_service.protocol = device_sdma\n"
                    f"simcluster.ring = {','.join(servers)}\nsimcluster.replicas = {replicas}\n")
    return path


class Procs:
    """Processes started by a test, stopped by PID (TERM, then KILL) at the end."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: list[subprocess.Popen] = []

    def start(self, argv: list[str], log_name: str, env: dict | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(argv, env=env, stdout=open(self.log_dir / log_name, "ab"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self.started.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.started:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def sim_env(self, host: str, **extra) -> dict:
        node = self.log_dir / f"node-{host}"
        node.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMCLUSTER_", "ASCEND_RT_"))}
        env.update(PYTHONPATH=str(ROOT), PYTHONHASHSEED="0", SIMCLUSTER_TIME_SCALE="0.05", SIMCLUSTER_STARTUP_S="0",
                   SIMCLUSTER_NODE_DIR=str(node), SIMCLUSTER_KVPOOL_DIR=str(self.log_dir / "kvpool"))
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def memcached(self, host: str) -> tuple[str, subprocess.Popen]:
        port = free_port(host)
        proc = self.start(["memcached", "-l", host, "-p", str(port), "-U", "0", "-m", "16", "-u", "root"],
                          f"memcached-{host}-{port}.log")
        wait_until(lambda: listening(host, port), what=f"memcached {host}:{port}")
        return f"{host}:{port}", proc

    def mooncake_master(self, host: str, rpc_port: int, metrics_port: int, snapshot_dir: Path | None = None):
        """The real master with the flags the deployment renders (apps/deployments/topology/profiles/vllm_ascend.py);
        with snapshot_dir also Mooncake's periodic snapshot (every second) and its restore at start. Waits for its
        /metrics."""
        argv = [str(Path(sys.executable).parent / "mooncake_master"), "--rpc_port", str(rpc_port), "--rpc_address",
                host, "--metrics_host", host, "--metrics_port", str(metrics_port), "--eviction_high_watermark_ratio",
                "0.9", "--eviction_ratio", "0.1", "--default_kv_lease_ttl", "11000", "--enable_offload=false",
                f"--client_ttl={MOONCAKE_CLIENT_TTL_S}", "--logtostderr=true"]
        env = None
        if snapshot_dir is not None:
            argv += ["--enable_snapshot=true", "--enable_snapshot_restore=true", "--snapshot_interval_seconds=1",
                     "--snapshot_object_store_type=local", f"--snapshot_backup_dir={snapshot_dir}"]
            env = {**os.environ, "MOONCAKE_SNAPSHOT_LOCAL_PATH": str(snapshot_dir)}  # the local store refuses without
        proc = self.start(argv, f"mooncake-master-{rpc_port}.log", env)
        wait_until(lambda: proc.poll() is not None or http_ok(f"http://{host}:{metrics_port}/metrics"),
                   timeout=30, what="mooncake_master's /metrics")
        assert proc.poll() is None, f"mooncake_master exited with {proc.returncode}"
        return proc

    def engine(self, host: str, kv: dict, lookup_rpc_port: int, **env) -> str:
        """A simulated vLLM engine without a local prefix cache (every reuse goes through the pool); its base URL."""
        port = free_port(host)
        argv = [sys.executable, "-m", "simcluster.engine", "serve", MODEL, "--host", host, "--port", str(port),
                "--served-model-name", SERVED, "--no-enable-prefix-caching", "--kv-transfer-config", json.dumps(kv)]
        proc = self.start(argv, f"engine-{host}-{port}.log", self.sim_env(host, **env))
        base = f"http://{host}:{port}"
        wait_until(lambda: proc.poll() is not None or http_ok(base + "/health"), timeout=60, what=f"engine {base}")
        assert proc.poll() is None, f"engine {base} exited with {proc.returncode}"
        return base

    def proxy(self, host: str, prefill: str, decode: str) -> str:
        port = free_port(host)
        self.start([sys.executable, "-m", "pdproxy", "--host", host, "--port", str(port), "--workers", "1",
                    "--prefill", prefill.removeprefix("http://"), "--decode", decode.removeprefix("http://")],
                   f"proxy-{port}.log", self.sim_env(host))
        base = f"http://{host}:{port}"
        wait_until(lambda: http_ok(base + "/health"), timeout=30, what="pdproxy")
        return base


def complete(proxy: str, text: str, timeout: float = 30.0) -> tuple[int, str]:
    """One completion through the proxy: (status, body); a status 0 means no answer at all."""
    req = urllib.request.Request(proxy + "/v1/completions", json.dumps(
        {"model": SERVED, "prompt": text, "max_tokens": 2}).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)
