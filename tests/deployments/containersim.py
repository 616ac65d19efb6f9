"""Helpers for the container runtime on a simulated cluster (127.0.10.70-.74 and .84, docs/contracts.md §2; shared
by tests/deployments/test_container_deploy_sim.py and tests/e2e/test_containers_in_browser.py, one xdist group):
the reference cluster there, the container example (examples/reference-topology-containers.yaml) for the sim
profile, what `docker` says on a node over SSH, and a node's container facts (node.json) changed for one test."""

from __future__ import annotations

import json
import shlex
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.deployments.simdeploy import PREFIX, REPO

ADDRESSES = (70, 71, 72, 73, 74, 84)  # node0-3, proxy, bench
ENGINE_NODES = ("node0", "node1", "node2", "node3")


def container_sim_spec() -> dict:
    from simcluster.spec import reference_spec

    spec = reference_spec(prefix=PREFIX)
    for node, last in zip(spec["nodes"], ADDRESSES, strict=True):
        node["address"] = f"{PREFIX}.{last}"
    spec["services"] = {}  # the deployment starts its own pool
    return spec


def containers_topology(run_dir: str, *, edit=None) -> str:
    """The container example as written, but for the sim profile: its own run dir and quick engine start-ups."""
    data = yaml.safe_load((REPO / "examples" / "reference-topology-containers.yaml").read_text())
    data.update(launch_profile="sim", run_dir=run_dir)
    for inst in data["instances"]:
        inst.setdefault("env", {}).update(SIMCLUSTER_STARTUP_S="0.2")
    if edit:
        edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def on_node(state: dict, node: str, *argv: str, timeout: float = 60) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one command over SSH on a simulated node, as the login user."""
    from tests.simcluster.simtest_helpers import ssh_connect, ssh_run

    info = state["nodes"][node]
    key = str(Path(state["inventory"]).parent / "id_ed25519")
    client = ssh_connect(info["address"], info["port"], info["host_key"], key)
    try:
        return ssh_run(client, " ".join(shlex.quote(a) for a in argv), timeout=timeout)
    finally:
        client.close()


def deployment_containers(state: dict, deployment: str, node: str) -> dict[str, dict]:
    """`docker ps -a --filter label=pdcp.deployment=<name>` on the node: container name -> its ps row."""
    status, out, err = on_node(state, node, "docker", "ps", "-a", "--no-trunc", "--filter",
                               f"label=pdcp.deployment={deployment}", "--format", "{{json .}}")
    assert status == 0, f"docker ps on {node}: {err}"
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {r["Names"]: r for r in rows}


def inspect(state: dict, node: str, name: str) -> dict:
    status, out, err = on_node(state, node, "docker", "inspect", name)
    assert status == 0, f"docker inspect {name} on {node}: {err}"
    return json.loads(out)[0]


def wait_for(what: str, check, timeout: float = 60, every: float = 0.5):
    """check()'s first true value within `timeout` s, else AssertionError naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; last seen {value!r}")
        time.sleep(every)


@contextmanager
def node_changed(state: dict, node: str, **facts):
    """The node's container facts (simcluster/spec.py node_containers: container_engine, images, host_paths)
    changed for the block; the shims read node.json on every call."""
    path = Path(state["nodes"][node]["dir"]) / "node.json"
    before = path.read_text()
    path.write_text(json.dumps({**json.loads(before), **facts}))
    try:
        yield
    finally:
        path.write_text(before)
