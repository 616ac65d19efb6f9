"""Real processes for the telemetry tests: the pdproxy suite's launcher (simcluster engines, pdproxy on
127.0.0.1 free ports, stopped by PID) plus a real mooncake_master on 127.0.10.240."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.pdproxy.proxy_procs import Cluster
from tests.ports import free_port  # noqa: F401  (re-exported)

__all__ = ["Cluster", "MODEL", "MOONCAKE_HOST", "free_port", "start_mooncake_master"]

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE_HOST = "127.0.10.240"
MODEL = "qwen3-235b"  # simcluster's profile for this name moves 192,512 B/token, as the reference spec's profile says


def start_mooncake_master(cluster) -> str:
    """A real mooncake_master on loopback; returns its metrics URL. Registered with the cluster to be stopped."""
    rpc, metrics = free_port(MOONCAKE_HOST), free_port(MOONCAKE_HOST)
    binary = Path(sys.executable).parent / "mooncake_master"
    proc = subprocess.Popen([sys.executable, str(binary), f"-rpc_address={MOONCAKE_HOST}", f"-rpc_port={rpc}",
                             f"-metrics_host={MOONCAKE_HOST}", f"-metrics_port={metrics}", "-logtostderr=true"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cluster.procs.append(proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((MOONCAKE_HOST, metrics), timeout=0.2):
                return f"http://{MOONCAKE_HOST}:{metrics}/metrics"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"mooncake_master did not listen on {MOONCAKE_HOST}:{metrics}")
