"""Fixtures for simcluster tests: a 0755 state root (sshd reads keys as the login user) and SSH helpers.

Addresses: simcluster tests use 127.0.10.100-.149 only (docs/contracts.md §2).
"""

import base64
import shutil
import tempfile
from pathlib import Path

import paramiko
import pytest

from simcluster.sshnode import generate_client_key


@pytest.fixture
def state_root():
    root = Path(tempfile.mkdtemp(prefix="simcluster-test-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def client_key(state_root):
    path = state_root / "id_ed25519"
    _private, public = generate_client_key(path)
    return path, public


class SshHelper:
    """Connect with a pinned host key and run one command per channel (stack-notes §2)."""

    connect = staticmethod(lambda *a, **k: ssh_connect(*a, **k))
    run = staticmethod(lambda *a, **k: ssh_run(*a, **k))


@pytest.fixture
def ssh():
    return SshHelper


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
