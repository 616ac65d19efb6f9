"""The `cluster` fixture: processes started for one test and stopped by PID at its end; `tokenizer`: the simulated
model's tokenizer directory (simcluster.tokenizer_dir), for the KV-events tests."""

import os
import subprocess
import sys

import pytest

from tests.pdproxy.proxy_procs import ROOT, Cluster


@pytest.fixture
def cluster():
    c = Cluster()
    try:
        yield c
    finally:
        c.stop_all()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    dest = tmp_path_factory.mktemp("tok")
    done = subprocess.run([sys.executable, "-m", "simcluster.tokenizer_dir", str(dest)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return str(dest)
