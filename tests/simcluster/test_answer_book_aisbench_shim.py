"""Sim nodes run AISBench (the evaluation client of the answer book) through an `ais_bench` shim on PATH."""

import subprocess
import sys
from pathlib import Path

import pytest

from simcluster import shims
from simcluster.runtime import NodeRuntime

REPO = Path(__file__).resolve().parents[2]
RUNTIME = NodeRuntime(python=sys.executable, pythonpath=(str(REPO),))


def run_shim(bin_dir, *args):
    return subprocess.run([str(bin_dir / "ais_bench"), *args], capture_output=True, text=True, timeout=20,
                          env={"PATH": "/usr/bin:/bin"})


@pytest.mark.procs
def test_the_shim_execs_the_aisbench_named_at_up_time(tmp_path, monkeypatch):
    fake = tmp_path / "venv" / "bin" / "ais_bench"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\necho "fake ais_bench $# args: $*"; echo "pythonpath=${PYTHONPATH:-unset}"; exit 3\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PDCP_AISBENCH", str(fake))
    bin_dir = shims.write_shims(tmp_path / "bin", RUNTIME)
    monkeypatch.delenv("PDCP_AISBENCH")  # fixed when the shims were written, not read at run time
    done = run_shim(bin_dir, "--models", "vllm_api_general_chat", "--mode", "all", "a b")
    assert done.returncode == 3
    assert done.stdout == "fake ais_bench 5 args: --models vllm_api_general_chat --mode all a b\npythonpath=unset\n"


@pytest.mark.procs
def test_a_missing_aisbench_exits_127_with_a_message(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere" / "ais_bench"
    monkeypatch.setenv("PDCP_AISBENCH", str(missing))
    done = run_shim(shims.write_shims(tmp_path / "bin", RUNTIME), "--help")
    assert done.returncode == 127 and done.stdout == ""
    assert f"ais_bench: {missing} is not installed" in done.stderr and "PDCP_AISBENCH" in done.stderr


def test_the_default_is_the_project_venv(tmp_path, monkeypatch):
    monkeypatch.delenv("PDCP_AISBENCH", raising=False)
    text = (shims.write_shims(tmp_path / "bin", RUNTIME) / "ais_bench").read_text()
    assert "AISBENCH=/opt/pdcp-aisbench/bin/ais_bench\n" in text
