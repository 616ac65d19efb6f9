"""Real OpenSSH nodes for the SSH executor tests (127.0.10.150-.169 is this suite's range).

Uses simcluster.sshnode (one sshd per loopback address, login user `simnode` with /bin/sh).
Nodes are session-scoped and stopped by PID at the end; tests that restart a node use their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from simcluster.sshnode import RunningSshNode, generate_client_key, start_ssh_node, stop_ssh_node
from sshexec import SshTarget

FARM_ADDRESSES = [f"127.0.10.{150 + i}" for i in range(8)]
RESTART_ADDRESS = "127.0.10.160"  # the node the reconnect test stops and starts again
SILENT_ADDRESS = "127.0.10.168"  # a TCP listener that never speaks SSH
DEAD_ADDRESS = "127.0.10.169"  # nothing listens here


@dataclass
class ClientKeys:
    ed25519: str
    ecdsa: str
    rsa_pem: str
    unauthorized: str
    public_lines: str  # all three authorized keys, one per line

    @property
    def ecdsa_public(self) -> str:
        return self.public_lines.splitlines()[1]


def _keygen(path: Path, *args: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-C", "test", "-f", str(path), *args], check=True,
                   capture_output=True)
    return path.read_text()


@pytest.fixture(scope="session")
def ssh_root():
    # sshd reads authorized_keys as `simnode`: every parent must be searchable (tmp_path is 0700).
    root = Path(tempfile.mkdtemp(prefix="pdcp-sshtests-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def client_keys(ssh_root) -> ClientKeys:
    keys = ssh_root / "keys"
    ed_text, ed_pub = generate_client_key(keys / "id_ed25519")
    ecdsa = _keygen(keys / "id_ecdsa", "-t", "ecdsa", "-b", "256")
    rsa = _keygen(keys / "id_rsa", "-t", "rsa", "-b", "2048", "-m", "PEM")
    stranger = _keygen(keys / "id_stranger", "-t", "ed25519")
    pubs = [ed_pub] + [" ".join((keys / f"{n}.pub").read_text().split()[:2]) for n in ("id_ecdsa", "id_rsa")]
    return ClientKeys(ed_text, ecdsa, rsa, stranger, "\n".join(pubs))


def _start_node(name: str, address: str, root: Path, keys: ClientKeys, **options) -> RunningSshNode:
    return start_ssh_node(name, address, 22, root / name, keys.public_lines, **options)


def _target_for(node: RunningSshNode, key: str | None, **changes) -> SshTarget:
    values = dict(name=node.name, address=node.address, port=node.port, username=node.user,
                  private_key=key, password=None, host_key=node.host_key_line)
    values.update(changes)
    return SshTarget(**values)


@pytest.fixture
def target_for():
    """target_for(node, private_key, **field_changes) -> SshTarget"""
    return _target_for


@pytest.fixture
def start_node(ssh_root, client_keys):
    """start_node(name, address, **start_ssh_node options) -> RunningSshNode; the caller stops it (stop_ssh_node)."""
    return lambda name, address, **options: _start_node(name, address, ssh_root, client_keys, **options)


@pytest.fixture
def session_pids():
    """session_pids(node) -> pids of the node's live session processes (children of its listener)."""
    return lambda node: _descendants(node.pid)


@pytest.fixture(scope="session")
def farm(ssh_root, client_keys):
    nodes: list[RunningSshNode] = []
    try:
        for i, address in enumerate(FARM_ADDRESSES):
            nodes.append(_start_node(f"node{i}", address, ssh_root, client_keys))
        yield nodes
    finally:
        for node in nodes:
            stop_ssh_node(node)


@pytest.fixture(scope="session")
def targets(farm, client_keys) -> list[SshTarget]:
    return [_target_for(node, client_keys.ed25519) for node in farm]


@pytest.fixture
def target(targets) -> SshTarget:
    return targets[0]


def _descendants(pid: int) -> list[int]:
    """Child processes (recursively) of pid, read from /proc; used to end a node's live sessions."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
