"""A small simulated cluster for the docker/podman shim tests (127.0.10.250-.254, docs/contracts.md §2) and SSH helpers."""

import contextlib
import shlex

from simcluster import cluster
from simcluster.spec import DEFAULT_IMAGE
from tests.simcluster.simtest_helpers import ssh_connect, ssh_run

IMAGE = DEFAULT_IMAGE["ref"]
OTHER_DIGEST = "sha256:" + "d" * 64


def container_spec() -> dict:
    def node(i, name, hardware, **extra):
        return {"name": name, "address": f"127.0.10.{i}", "ssh_port": 22, "hardware": hardware, "role": "prefill",
                "labels": {}, **extra}

    return {"name": "containers", "services": {}, "nodes": [
        node(250, "dock0", "A3"),
        node(251, "pod0", "910B", container_engine="podman"),
        node(252, "bare0", "A3", container_engine="none"),
        node(253, "otherdigest0", "A3", images=[{**DEFAULT_IMAGE, "digest": OTHER_DIGEST}]),
    ]}


def down_spec() -> dict:
    """One docker node on .254, for the test that takes its own cluster down."""
    return {"name": "containers-down", "services": {}, "nodes": [
        {"name": "dock1", "address": "127.0.10.254", "ssh_port": 22, "hardware": "A3", "role": "prefill",
         "labels": {}}]}


@contextlib.contextmanager
def container_cluster(state_dir, spec: dict | None = None):
    state = cluster.up(spec or container_spec(), state_dir)
    clients = {}
    try:
        for name, info in state["nodes"].items():
            clients[name] = ssh_connect(info["address"], 22, info["host_key"], str(state_dir / "id_ed25519"))
        yield state, clients
    finally:
        for client in clients.values():
            client.close()
        cluster.down(state_dir)


def sh(client, *argv, env: dict | None = None, timeout: float = 30):
    """(exit status, stdout, stderr) of one command line over SSH, every word quoted."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return ssh_run(client, (prefix + " " if prefix else "") + " ".join(shlex.quote(a) for a in argv), timeout=timeout)
