"""Is a working AISBench installed? scripts/aisbench-venv.sh (`make aisbench`) installs it into its own venv,
${PDCP_AISBENCH_HOME:-/opt/pdcp-aisbench}; the control plane finds its `ais_bench` through PDCP_AISBENCH."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_AIS_BENCH = "/opt/pdcp-aisbench/bin/ais_bench"
FIX = "make aisbench"
# `import datasets` is what fails when pyarrow and numpy disagree (docs/aisbench-facts.md, "Install");
# `ais_bench --help` would still work then, because the CLI imports lazily.
PROBE = ("import importlib.metadata as m, datasets, ais_bench.benchmark.cli.main; "
         "print(m.version('ais_bench_benchmark'))")


@dataclass(frozen=True)
class InstallStatus:
    ok: bool
    version: str = ""
    problem: str = ""


def ais_bench_path(env: Mapping[str, str] = os.environ) -> str:
    return env.get("PDCP_AISBENCH") or DEFAULT_AIS_BENCH


def venv_python(ais_bench: Path) -> Path:
    """The interpreter that runs the entry point: its shebang, else the venv's python beside it."""
    try:
        first = ais_bench.open("rb").readline(512).decode(errors="replace").strip()
    except OSError:
        first = ""
    if first.startswith("#!") and " " not in first[2:].strip():
        return Path(first[2:].strip())
    return ais_bench.with_name("python")


def check_install(ais_bench: str | Path, timeout: float = 30.0) -> InstallStatus:
    """Runs the venv's interpreter on a probe that imports what every run imports; never raises."""
    path = Path(ais_bench)
    if not path.is_file():
        return InstallStatus(False, problem=f"AISBench is not installed: {path} does not exist; run `{FIX}`")
    if not os.access(path, os.X_OK):
        return InstallStatus(False, problem=f"AISBench is broken: {path} is not executable; run `{FIX}`")
    python = venv_python(path)
    try:
        done = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd="/", env=probe_env())
    except subprocess.TimeoutExpired:
        return InstallStatus(False, problem=f"AISBench is broken: importing it took over {timeout:g} s; run `{FIX}`")
    except OSError as e:
        return InstallStatus(False, problem=f"AISBench is broken: cannot run {python} ({e.strerror}); run `{FIX}`")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        return InstallStatus(False, problem=f"AISBench is broken: its import fails with {last[:300]}; run `{FIX}`")
    return InstallStatus(True, version=done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")


def probe_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
