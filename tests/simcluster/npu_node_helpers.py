"""A simulated cluster's node dirs as `up` writes them (node.json with versions and the NPU address plan, a
state.json naming them for the fault CLI), and the node tools run in-process: no sshd, no subprocess."""

from __future__ import annotations

from pathlib import Path

from simcluster import cli, cluster, nodestate

SPEC = {"name": "hccn-test", "nodes": [
    {"name": "node0", "address": "127.0.10.101", "hardware": "A3"},
    {"name": "node1", "address": "127.0.10.102", "hardware": "A3"},
    {"name": "node2", "address": "127.0.10.103", "hardware": "910B", "versions": {"driver": "23.0.5"}},
    {"name": "proxy", "address": "127.0.10.104", "hardware": ""},
]}


def make_cluster(state_dir: Path, spec: dict = SPEC) -> dict[str, Path]:
    dirs = {}
    for position, node in enumerate(spec["nodes"]):
        ndir = state_dir / "nodes" / node["name"]
        (ndir / "engines").mkdir(parents=True)
        nodestate.write_json(ndir / "node.json", {"name": node["name"], "address": node["address"],
                                                  "hardware": node["hardware"],
                                                  **cluster.node_npu_setup(spec, node, position)})
        dirs[node["name"]] = ndir
    nodestate.write_json(state_dir / "state.json",
                         {"spec": spec, "nodes": {name: {"dir": str(d)} for name, d in dirs.items()}})
    return dirs


def run_tool(monkeypatch, capsys, main, node_dir: Path, *argv: str) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of a node tool's main() run as if in an SSH session on that node."""
    monkeypatch.setenv("SIMCLUSTER_NODE_DIR", str(node_dir))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return out, err, code


def fault(capsys, state_dir: Path, *argv: str) -> str:
    """`python -m simcluster fault ...` in-process; its one line of output."""
    assert cli.main(["fault", *argv, "--state-dir", str(state_dir)]) == 0
    return capsys.readouterr().out
