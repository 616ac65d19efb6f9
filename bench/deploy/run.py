"""Deploy time of the reference topology (sim profile) with parallel SSH fan-out vs one node at a time, and
64 commands over 8 nodes through the deployment jobs' Fleet, as ratios measured side by side.

Run as root (it starts sshd): DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/deploy/run.py
It creates and drops its own test database, starts a simulated cluster on 127.0.10.220-.227 (the deployment
tests' range) and stops everything by PID at the end. bench/ssh/run.py measures the bare SSH executor.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PDCP_DATA_DIR", str(REPO / "data" / "test"))

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402
from django.db import connection  # noqa: E402

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
ADDRESSES = [f"127.0.10.{220 + i}" for i in range(8)]


def cluster_spec() -> dict:
    from simcluster.spec import reference_spec

    spec = reference_spec()
    spec["nodes"] += [{"name": f"extra{i}", "address": "", "ssh_port": 22, "hardware": "", "role": "client",
                       "labels": {}} for i in range(2)]
    for node, address in zip(spec["nodes"], ADDRESSES, strict=True):
        node["address"] = address
    spec["services"] = {}
    return spec


def topology(run_dir: str) -> str:
    data = yaml.safe_load((REPO / "examples" / "reference-topology-fixed.yaml").read_text())
    data.update(launch_profile="sim", run_dir=run_dir, bench_client={"node": "bench"})
    for inst in data["instances"]:
        inst["env"] = {"SIMCLUSTER_STARTUP_S": "0.3"}
    return yaml.safe_dump(data, sort_keys=False)


class QuietContext:
    """Enough of a JobContext for Fleet outside a job."""

    def log(self, *a, **k):
        pass


def main() -> None:
    from apps.deployments.fleet import Fleet
    from apps.deployments.inventory_lookup import cluster_nodes
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.jobs import tasks
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job
    from simcluster import cluster
    from simcluster.rundirs import new_run_dir

    tasks.run_job_task.apply_async = lambda *a, **k: None  # the bench runs each job itself, in this process
    # Our own database name: never clobber a test database someone else's run uses.
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"test_pdcp_bench_deploy_{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0)
    state_dir = Path(tempfile.mkdtemp(prefix="pdcp-bench-deploy-", dir="/tmp"))
    state_dir.chmod(0o755)
    run_dir = new_run_dir("bench-deploy")  # private to the login user: the start refuses one below /tmp
    try:
        state = cluster.up(cluster_spec(), state_dir)
        inventory_import(Path(state["inventory"]).read_text(), allow_key_files=True)
        ref = Cluster.objects.get(name="reference")
        deployment = deployment_create(name="bench", cluster=ref, user=None, yaml_text=topology(run_dir))

        def job(starter, **params) -> float:
            j = starter(deployment=deployment, user=None, params={"stop_grace": 3, **params})
            t0 = time.perf_counter()
            run_job(j.pk)
            seconds = time.perf_counter() - t0
            j = Job.objects.get(pk=j.pk)
            if j.status != "successful":
                raise SystemExit(f"{j.kind} failed: {j.explanation}")
            if os.environ.get("BENCH_TIMELINE") and j.kind == "deploy":
                for e in j.events.filter(stream="step"):
                    print(f"    {(e.time - j.started).total_seconds():6.2f}s {e.node or '-':<8} {e.text[:90]}")
            return seconds

        results = {"parallel (max_parallel=8)": [], "sequential (max_parallel=1)": []}
        for _ in range(REPEATS):
            results["parallel (max_parallel=8)"].append(job(deployment_deploy, max_parallel=8))
            job(deployment_stop)
            results["sequential (max_parallel=1)"].append(job(deployment_deploy, max_parallel=1))
            job(deployment_stop)
        par = statistics.median(results["parallel (max_parallel=8)"])
        seq = statistics.median(results["sequential (max_parallel=1)"])
        print(f"deploy of the reference topology (15 processes on 6 nodes, 4 stages, probe), median of {REPEATS}:")
        for name, values in results.items():
            print(f"  {name:<30} {statistics.median(values):6.2f}s  ({', '.join(f'{v:.2f}' for v in values)})")
        print(f"  sequential / parallel = {seq / par:.2f}x")

        nodes = cluster_nodes(ref)
        pairs = [(name, f"echo {i}; cat /proc/loadavg") for i, name in
                 ((i, list(nodes)[i % len(nodes)]) for i in range(64))]
        print(f"64 commands over {len(nodes)} nodes through Fleet (persistent connection per node), median of 5:")
        timings = {}
        for bound in (8, 1):
            fleet = Fleet(QuietContext(), nodes, max_parallel=bound)
            fleet.run_many([(n, "true") for n in nodes], timeout=20)  # connect first: measure commands only
            runs = []
            for _ in range(5):
                t0 = time.perf_counter()
                outcomes = fleet.run_many(pairs, timeout=20)
                runs.append(time.perf_counter() - t0)
                assert all(o.ok for o in outcomes)
            fleet.pool.close()
            timings[bound] = statistics.median(runs)
            print(f"  max_parallel={bound:<3} {timings[bound] * 1000:7.1f} ms")
        print(f"  sequential / parallel = {timings[1] / timings[8]:.2f}x")
    finally:
        cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
