"""Helpers shared by the simcluster tests."""

import base64
import os
import time
import urllib.request
from pathlib import Path

import paramiko

from tests.ports import free_port  # noqa: F401  (re-exported)
from tests.waiting import wait_until  # noqa: F401  (re-exported)

REPO = Path(__file__).resolve().parents[2]


def sim_env(**extra):
    """Environment for simulator processes: importable from the repo, fast simulated time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMCLUSTER_", "ASCEND_RT_"))}
    env.update({"PYTHONPATH": str(REPO), "SIMCLUSTER_TIME_SCALE": "0.05", "SIMCLUSTER_STARTUP_S": "0"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def wait_http(url, timeout=60.0, proc=None):
    """Until url answers. A deadline, not a wait: generous, because beside the real-engine tests (two engines keep
    both cores busy) a simulated engine took over 15 s to start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return resp.status
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def ssh_connect(address, port, host_key_line, key_path, user="simnode", attempts=3):
    """paramiko client that trusts only the pinned host key. A handshake that breaks off (a full run once saw
    paramiko's "Invalid packet blocking" mid key exchange) is tried again on a new connection, as sshexec's
    connect does; a refused key or host key is not."""
    kind, b64 = host_key_line.split()[:2]
    for attempt in range(1, attempts + 1):
        client = paramiko.SSHClient()
        client.get_host_keys().add(address if port == 22 else f"[{address}]:{port}", kind,
                                   paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(address, port, username=user, key_filename=str(key_path), look_for_keys=False,
                           allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5)
            return client
        except (paramiko.AuthenticationException, paramiko.BadHostKeyException):
            client.close()
            raise
        except (paramiko.SSHException, EOFError):
            client.close()
            if attempt == attempts:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def ssh_run(client, command, timeout=20):
    channel = client.get_transport().open_session(timeout=timeout)
    channel.settimeout(timeout)
    channel.exec_command(command)
    out = channel.makefile().read().decode()
    err = channel.makefile_stderr().read().decode()
    return channel.recv_exit_status(), out, err


def post(url, body, timeout=20, headers=None):
    import json

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def metric(url, name, **labels):
    """Sum of a metric's samples at url (an engine's base URL, or a full /metrics URL) whose labels match."""
    text = urllib.request.urlopen(url if url.endswith("/metrics") else url + "/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total




def start_mooncake_master(spawn, host, log_dir):
    """A real mooncake_master with the flags the deployment renders; returns (rpc address, metrics URL)."""
    import sys

    rpc, metrics_port = free_port(host), free_port(host)
    spawn([sys.executable, str(Path(sys.executable).parent / "mooncake_master"), "--port", str(rpc),
           "--rpc_address", host, "--metrics_host", host, "--metrics_port", str(metrics_port),
           "--default_kv_lease_ttl", "5000", "--client_ttl", "10", "--logtostderr=true"],
          None, log_dir / f"mooncake-master-{rpc}.log")
    url = f"http://{host}:{metrics_port}/metrics"
    wait_http(url)
    return f"{host}:{rpc}", url


def write_mooncake_json(path, master):
    """The file the control plane renders (docs/ascend-pd-launch-facts.md §3.2 keys)."""
    import json

    path.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "ascend", "device_name": "",
                                "master_server_address": master, "global_segment_size": "1GB",
                                "preferred_segment": False, "prefer_alloc_in_same_node": True}))
    return path


def pool_kv_config(role, kv_port, lookup_rpc_port, backend="mooncake", tp=(1, 1), **store_extra):
    """MultiConnector = MooncakeConnectorV1 + AscendStoreConnector, as the control plane renders it."""
    p2p = {"kv_connector": "MooncakeConnectorV1", "kv_role": role, "kv_port": str(kv_port),
           "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": tp[0]},
                                         "decode": {"dp_size": 1, "tp_size": tp[1]}}}
    store = {"kv_connector": "AscendStoreConnector", "kv_role": role,
             "kv_connector_extra_config": {"backend": backend, "lookup_rpc_port": str(lookup_rpc_port),
                                           **store_extra}}
    return {"kv_connector": "MultiConnector", "kv_role": role,
            "kv_connector_extra_config": {"connectors": [p2p, store]}}
