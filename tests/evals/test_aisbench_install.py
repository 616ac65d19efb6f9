"""check_install's one-line problems, and the install script's stamp (no real install: a stand-in python)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.evals.aisbench.install import DEFAULT_AIS_BENCH, ais_bench_path, check_install

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "aisbench-venv.sh"


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_the_path_comes_from_pdcp_aisbench():
    assert ais_bench_path({}) == DEFAULT_AIS_BENCH == "/opt/pdcp-aisbench/bin/ais_bench"
    assert ais_bench_path({"PDCP_AISBENCH": "/x/bin/ais_bench"}) == "/x/bin/ais_bench"


def test_a_missing_file(tmp_path):
    status = check_install(tmp_path / "bin" / "ais_bench")
    assert not status.ok and status.version == ""
    assert status.problem == f"AISBench is not installed: {tmp_path}/bin/ais_bench does not exist; run `make aisbench`"


def test_a_file_that_is_not_executable(tmp_path):
    (tmp_path / "ais_bench").write_text("#!/bin/sh\n")
    status = check_install(tmp_path / "ais_bench")
    assert not status.ok and "is not executable; run `make aisbench`" in status.problem


@pytest.mark.procs
def test_a_venv_whose_import_fails(tmp_path):
    # this interpreter has no `datasets`: the probe's import fails as it does when pyarrow and numpy disagree
    script = executable(tmp_path / "ais_bench", f"#!{sys.executable}\nraise SystemExit(0)\n")
    status = check_install(script)
    assert not status.ok and "\n" not in status.problem
    assert status.problem.startswith("AISBench is broken: its import fails with ModuleNotFoundError: No module named")
    assert status.problem.endswith("; run `make aisbench`")


@pytest.mark.procs
def test_a_venv_python_that_cannot_run_or_hangs(tmp_path):
    status = check_install(executable(tmp_path / "ais_bench", f"#!{tmp_path}/nowhere/python\n"))
    assert not status.ok and f"cannot run {tmp_path}/nowhere/python" in status.problem
    hanging = executable(tmp_path / "python", "#!/bin/sh\nsleep 5\n")
    status = check_install(executable(tmp_path / "ais_bench2", f"#!{hanging}\n"), timeout=0.5)
    assert not status.ok and "importing it took over 0.5 s; run `make aisbench`" in status.problem


@pytest.mark.procs
def test_a_probe_that_passes_reports_the_version(tmp_path):
    fake = executable(tmp_path / "python", "#!/bin/sh\necho 3.1.20260630\n")
    status = check_install(executable(tmp_path / "ais_bench", f"#!{fake}\n"))
    assert (status.ok, status.version, status.problem) == (True, "3.1.20260630", "")


def wanted_stamp() -> str:
    digest = hashlib.sha256((REPO / "requirements" / "aisbench.txt").read_bytes()).hexdigest()
    return f"{digest} torch==2.13.0\n"


def run_script(home: Path, python: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PDCP_AISBENCH_HOME": str(home), "PDCP_AISBENCH_PYTHON": str(python)}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def stand_in_python(tmp_path: Path) -> Path:
    """Passes the venv-module check, then fails to build any venv (as a broken or interrupted install would)."""
    log = tmp_path / "python-calls"
    return executable(tmp_path / "python3.11", f'#!/bin/sh\necho "$*" >> {log}\n'
                                               'case "$*" in *ensurepip*) exit 0 ;; *) exit 1 ;; esac\n')


def installed_venv(home: Path, stamp: str) -> None:
    (home / "bin").mkdir(parents=True)
    executable(home / "bin" / "ais_bench", "#!/bin/sh\n")
    (home / ".pdcp-aisbench-stamp").write_text(stamp)
    # the simulated model's tokenizer, current for the code that defines it
    sources = b"".join((REPO / "simcluster" / f).read_bytes() for f in ("tokenizer_dir.py", "engine/textgen.py"))
    (home / "sim-tokenizer").mkdir()
    (home / "sim-tokenizer" / ".pdcp-stamp").write_text(hashlib.sha256(sources).hexdigest() + "\n")


@pytest.mark.procs
def test_a_current_stamp_does_nothing_fast(tmp_path):
    home = tmp_path / "venv"
    installed_venv(home, wanted_stamp())
    (home / "keep").write_text("untouched")
    started = time.monotonic()
    done = run_script(home, stand_in_python(tmp_path))
    assert time.monotonic() - started < 1.0
    assert done.returncode == 0 and "up to date" in done.stdout
    assert (home / "keep").read_text() == "untouched" and not (tmp_path / "python-calls").exists()


@pytest.mark.procs
def test_changed_requirements_rebuild_and_a_failed_install_leaves_no_stamp(tmp_path):
    home = tmp_path / "venv"
    installed_venv(home, "0" * 64 + " torch==2.13.0\n")  # the stamp of other requirements
    (home / "keep").write_text("old venv")
    done = run_script(home, stand_in_python(tmp_path))
    assert done.returncode != 0
    assert not (home / "keep").exists(), "the old venv is removed before the rebuild"
    assert not (home / ".pdcp-aisbench-stamp").exists() and not (home / ".pdcp-aisbench-stamp.tmp").exists()
    assert f"-m venv {home}" in (tmp_path / "python-calls").read_text()


def test_requirements_pin_everything_but_torch():
    lines = [line for line in (REPO / "requirements" / "aisbench.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    assert all("==" in line for line in lines)
    names = {line.split("==")[0].lower().replace("_", "-") for line in lines}
    assert "torch" not in names and {"ais-bench-benchmark", "numpy", "pyarrow", "datasets"} <= names
    pins = dict(line.lower().split("==") for line in lines)
    assert pins["ais_bench_benchmark"] == "3.1.20260630" and pins["pyarrow"].startswith("25.")
    assert pins["numpy"].startswith("1.")
