"""Fixtures for simcluster tests: a 0755 state root (sshd reads keys as the login user) and SSH helpers.

Addresses: simcluster tests use 127.0.10.100-.149 only (docs/contracts.md §2).
"""

import shutil
import tempfile
from pathlib import Path

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



@pytest.fixture
def spawn():
    """Start processes; every one is stopped by PID (TERM, then KILL) and reaped at teardown."""
    import subprocess

    started = []

    def start(argv, env, log):
        proc = subprocess.Popen(argv, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.terminate()
    for proc in started:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


