"""A checkout only root can enter (mktemp -d, /root) still runs the simulated nodes; a failed `up` leaves nothing.

Addresses 127.0.10.120-.125 are this file's.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from simcluster import runtime
from simcluster.cluster import _port_open
from simcluster.sshnode import LOGIN_USER, ensure_login_user, pid_alive
from tests.simcluster.simtest_helpers import REPO, free_port, sim_env, ssh_connect, ssh_run

pytestmark = pytest.mark.procs  # every test here starts processes or servers

SVC = "127.0.10.125"


@pytest.fixture
def private_checkout():
    """The simulator's sources in a 0700 directory, as a clone below `mktemp -d` or /root has them."""
    root = Path(tempfile.mkdtemp(prefix="pdcp-private-", dir="/tmp"))
    assert root.stat().st_mode & 0o777 == 0o700
    for package in runtime.NODE_PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _cli(checkout: Path, runtime_root: Path, *args, check=True):
    env = sim_env(SIMCLUSTER_RUNTIME_ROOT=str(runtime_root))
    env["PYTHONPATH"] = str(checkout)
    out = subprocess.run([sys.executable, "-m", "simcluster", *args], capture_output=True, text=True, env=env,
                         cwd=checkout, timeout=90)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def _spec(path: Path, nodes: list[dict], services: dict | None = None) -> Path:
    spec = {"name": "private", "nodes": nodes}
    if services:
        spec["services"] = services
    path.write_text(yaml.safe_dump(spec))
    return path


def test_nodes_run_the_simulator_from_a_checkout_only_root_can_enter(private_checkout, state_root):
    spec = _spec(state_root / "spec.yaml", [{"name": "p0", "address": "127.0.10.120", "hardware": "A3"}])
    sdir = state_root / "sim"
    _cli(private_checkout, state_root / "runtime", "up", "--spec", str(spec), "--state-dir", str(sdir))
    try:
        inv = yaml.safe_load((sdir / "inventory.yaml").read_text())
        node = inv["clusters"][0]["nodes"][0]
        client = ssh_connect("127.0.10.120", 22, node["host_key"], inv["credentials"][0]["private_key_file"])
        try:
            # Every program a deploy runs on a node, started by the unprivileged login user.
            rc, out, err = ssh_run(client, "npu-smi info")
            assert rc == 0 and "npu-smi" in out, err
            rc, out, err = ssh_run(client, "mooncake_master --version")
            assert rc == 0 and "mooncake_master version" in out + err, out + err
            rc, out, err = ssh_run(client, "pdproxy --help")
            assert rc == 0 and "--prefill" in out, err
            rc, out, err = ssh_run(client, "vllm --help")
            assert rc == 0, err
        finally:
            client.close()
        shims = (sdir / "bin" / "vllm").read_text()
        assert str(private_checkout) not in shims
    finally:
        _cli(private_checkout, state_root / "runtime", "down", "--state-dir", str(sdir))


def test_the_published_runtime_is_readable_but_not_writable_by_the_login_user():
    root = Path(tempfile.mkdtemp(prefix="pdcp-runtime-", dir="/tmp"))
    root.chmod(0o755)
    try:
        rt = runtime.publish(root / "rt")
        assert runtime.publish(root / "rt") == rt  # same content: the same trees, nothing rebuilt
        ensure_login_user()
        probe = ("import simcluster.engine, pdproxy.app, aiohttp, mooncake.cli, sys; "
                 "open(sys.argv[1] + '/x', 'w')")
        out = subprocess.run([rt.python, "-c", probe, rt.pythonpath[0]], user=LOGIN_USER, group=LOGIN_USER,
                             extra_groups=[], cwd="/", capture_output=True, text=True,
                             env={"PYTHONPATH": ":".join(rt.pythonpath)}, timeout=60)
        assert "PermissionError" in out.stderr, out.stderr  # imports worked, writing did not
        assert "ModuleNotFoundError" not in out.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_failed_up_stops_what_it_started_and_up_works_again(private_checkout, state_root):
    services = {"host": SVC, "mooncake_rpc_port": free_port(SVC), "mooncake_metrics_port": free_port(SVC),
                "memcached_ports": [free_port(SVC)]}
    # Two nodes on one address and port: the second sshd cannot bind, after the services and node 1 started.
    bad = _spec(state_root / "bad.yaml", [{"name": "a", "address": "127.0.10.121", "hardware": "A3"},
                                          {"name": "b", "address": "127.0.10.121", "hardware": "A3"}], services)
    sdir = state_root / "sim"
    failed = _cli(private_checkout, state_root / "runtime", "up", "--spec", str(bad), "--state-dir", str(sdir),
                  check=False)
    assert failed.returncode != 0
    deadline = time.monotonic() + 5
    listening = [("memcached", services["memcached_ports"][0]), ("mooncake", services["mooncake_rpc_port"])]
    while time.monotonic() < deadline and (
            any(_port_open(SVC, port) for _, port in listening) or _port_open("127.0.10.121", 22)):
        time.sleep(0.1)
    assert not [name for name, port in listening if _port_open(SVC, port)]
    assert not _port_open("127.0.10.121", 22)

    good = _spec(state_root / "good.yaml", [{"name": "a", "address": "127.0.10.121", "hardware": "A3"},
                                            {"name": "b", "address": "127.0.10.122", "hardware": "A3"}], services)
    _cli(private_checkout, state_root / "runtime", "up", "--spec", str(good), "--state-dir", str(sdir))
    _cli(private_checkout, state_root / "runtime", "down", "--state-dir", str(sdir))


def test_a_state_dir_whose_pids_now_belong_to_others_is_not_running(private_checkout, state_root):
    sdir = state_root / "sim"
    sdir.mkdir()
    # A stale state: the recorded PID (ours, alive) was reused; its start time tells it apart.
    (sdir / "state.json").write_text(json.dumps({"pids": {"sshd:p0": os.getpid()}, "pid_starts": {"sshd:p0": 1}}))
    spec = _spec(state_root / "spec.yaml", [{"name": "p0", "address": "127.0.10.123", "hardware": "910B"}])
    _cli(private_checkout, state_root / "runtime", "up", "--spec", str(spec), "--state-dir", str(sdir))
    state = json.loads((sdir / "state.json").read_text())
    _cli(private_checkout, state_root / "runtime", "down", "--state-dir", str(sdir))
    assert pid_alive(os.getpid())
    assert not pid_alive(state["pids"]["sshd:p0"])
