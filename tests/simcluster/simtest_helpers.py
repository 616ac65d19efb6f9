"""Helpers shared by simcluster tests (imported by plain name: tests/simcluster has no __init__.py)."""

import base64
import os
import socket
import time
import urllib.request
from pathlib import Path

import paramiko

REPO = Path(__file__).resolve().parents[2]


def sim_env(**extra):
    """Environment for simulator processes: importable from the repo, fast simulated time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMCLUSTER_", "ASCEND_RT_"))}
    env.update({"PYTHONPATH": str(REPO), "SIMCLUSTER_TIME_SCALE": "0.05", "SIMCLUSTER_STARTUP_S": "0"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_http(url, timeout=15.0, proc=None):
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


def ssh_connect(address, port, host_key_line, key_path, user="simnode"):
    """paramiko client that trusts only the pinned host key."""
    client = paramiko.SSHClient()
    kind, b64 = host_key_line.split()[:2]
    client.get_host_keys().add(address if port == 22 else f"[{address}]:{port}", kind,
                               paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(address, port, username=user, key_filename=str(key_path), look_for_keys=False,
                   allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5)
    return client


def ssh_run(client, command, timeout=20):
    channel = client.get_transport().open_session(timeout=timeout)
    channel.settimeout(timeout)
    channel.exec_command(command)
    out = channel.makefile().read().decode()
    err = channel.makefile_stderr().read().decode()
    return channel.recv_exit_status(), out, err
