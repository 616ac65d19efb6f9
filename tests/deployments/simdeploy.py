"""Helpers for the deployment tests that run against a real simulated cluster (addresses 127.0.10.210-.215)."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PREFIX = "127.0.10"
FIRST = 210  # node0 .210 ... bench .215; this suite's range is .200-.239 (docs/contracts.md §2)


def sim_spec(first: int = FIRST) -> dict:
    from simcluster.spec import reference_spec

    spec = reference_spec(prefix=PREFIX)
    for i, node in enumerate(spec["nodes"]):
        node["address"] = f"{PREFIX}.{first + i}"
    spec["services"] = {}  # the deployment starts its own store and pool
    return spec


def start_cluster(first: int = FIRST, *, without: tuple[str, ...] = ()):
    """A simulated reference cluster on 127.0.10.<first> ... <first + 5> (each test module its own range), less the
    nodes named in `without`."""
    spec = sim_spec(first)
    spec["nodes"] = [n for n in spec["nodes"] if n["name"] not in without]
    return start_spec(spec)


def start_spec(spec: dict, prefix: str = "pdcp-deploy-sim-"):
    """A simulated cluster of this spec in a state dir of its own: (state dir, its state); stopped if `up` fails."""
    from simcluster import cluster

    state_dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    state_dir.chmod(0o755)
    try:
        state = cluster.up(spec, state_dir)
    except BaseException:
        cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        raise
    return state_dir, state


def stop_cluster(state_dir: Path) -> None:
    from simcluster import cluster

    try:
        cluster.down(state_dir)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


@contextmanager
def running_spec(spec: dict, prefix: str = "pdcp-deploy-sim-"):
    """start_spec as a context: yields the cluster's state and stops it however the block ends."""
    state_dir, state = start_spec(spec, prefix)
    try:
        yield state
    finally:
        stop_cluster(state_dir)


@contextmanager
def running_cluster(first: int = FIRST, *, without: tuple[str, ...] = ()):
    """start_cluster as a context: yields the cluster's state and stops it however the block ends."""
    state_dir, state = start_cluster(first, without=without)
    try:
        yield state
    finally:
        stop_cluster(state_dir)


def topology_yaml(run_dir: str, *, edit=None) -> str:
    data = yaml.safe_load((REPO / "examples" / "reference-topology-fixed.yaml").read_text())
    data["launch_profile"] = "sim"
    data["run_dir"] = run_dir
    data["bench_client"] = {"node": "bench"}
    for inst in data["instances"]:
        inst.setdefault("env", {})["SIMCLUSTER_STARTUP_S"] = "0.2"
    if edit:
        edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def new_run_dir() -> str:
    """Below simnode's private 0700 root, never /tmp: the start refuses a run dir other local users could reach.
    Not created here: the login user creates it over SSH."""
    from simcluster.rundirs import new_run_dir as private_run_dir

    return private_run_dir("deploy")


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def pids_in(run_dir: str) -> dict[str, int]:
    """Every pid file the deployment's processes wrote, read from the (shared) disk of the sim nodes."""
    out = {}
    for f in Path(run_dir, "pids").glob("*.pid"):
        text = f.read_text().strip()
        if text.isdigit():
            out[f.stem] = int(text)
    return out


def processes_mentioning(run_dir: str) -> list[int]:
    """Any live process working in the run dir (every detached start cd's there) or naming it: what nobody
    would know of."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes()
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if (run_dir.encode() in cmd or cwd == run_dir) and pid_alive(int(proc.name)):
            found.append(int(proc.name))
    return found


def log_tails(run_dir: str, lines: int = 25) -> str:
    """The last lines of every log in the run dir (engines, proxy, ais_bench passes): what a timed-out test shows."""
    parts = []
    for log in sorted(Path(run_dir).rglob("*.log")):
        try:
            text = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError as exc:
            text = [f"(unreadable: {exc})"]
        parts.append(f"--- {log}\n" + "\n".join(text))
    return "\n".join(parts) or f"(no logs in {run_dir})"


def remove_run_dir(path: str) -> None:
    """Teardown of a test's run dir: kill what still runs there (so the next test starts clean), remove it, and
    fail the test that left anything running."""
    import signal

    leftovers = processes_mentioning(path)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)
    assert not leftovers, f"processes left running in {path}: {leftovers}"


def run_job_now(starter, deployment, user, **kwargs):
    """Create a deployment job with `starter` (deployment_deploy, deployment_stop...) and run it in this process."""
    from apps.jobs.runner import run_job

    params = {"health_timeout": 30, "stop_grace": 3, **kwargs.pop("params", {})}
    job = starter(deployment=deployment, user=user, params=params, **kwargs)
    run_job(job.pk)
    return job_ended(job.pk)


def job_ended(job_id: int, timeout: float = 600.0):
    """The job once it has ended. With a live stack's Celery worker beside the test, the worker may have taken the
    job from the queue before run_job did ("job N is running: not running it again"): then wait for that worker."""
    import time

    from apps.jobs.models import Job

    deadline = time.monotonic() + timeout
    while not (job := Job.objects.get(pk=job_id)).is_finished:
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} ({job.kind}) still {job.status} after {timeout:.0f} s")
        time.sleep(0.2)
    return job


def cluster_fixture(first: int = FIRST, *, without: tuple[str, ...] = ()):
    """A module-scoped pytest fixture: the simulated reference cluster on 127.0.10.<first>... (less the services
    named in `without`), yielding its state."""
    import pytest

    @pytest.fixture(scope="module")
    def sim():
        state_dir, state = start_cluster(first, without=without)
        try:
            yield state
        finally:
            stop_cluster(state_dir)

    return sim


def import_inventory(state: dict):
    """The simulated cluster's inventory in the database; returns its Cluster."""
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    inventory_import(Path(state["inventory"]).read_text(), allow_key_files=True)
    return Cluster.objects.get(name="reference")
