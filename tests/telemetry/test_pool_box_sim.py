"""Issue 12 item 5 on the simulated cluster (127.0.10.60-.64: node0-3 and the proxy node, no bench client): the
reference topology with its Mooncake pool deployed, the real mooncake_master's page read before and after requests
put KV blocks in the pool; the box under the pool must show what the master holds (keys, bytes of capacity,
segments and clients), never the 0 of 0 of a page read wrong."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.deployments.simdeploy import import_inventory, run_job_now, sim_spec

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]
FIRST = 60


@pytest.fixture(scope="module")
def sim():
    from simcluster import cluster

    spec = sim_spec(FIRST)
    spec["nodes"] = [n for n in spec["nodes"] if n["name"] != "bench"]  # five addresses: no evaluation client
    state_dir = Path(tempfile.mkdtemp(prefix="pdcp-poolbox-sim-", dir="/tmp"))
    state_dir.chmod(0o755)
    try:
        yield cluster.up(spec, state_dir)
    finally:
        cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


def no_bench(data: dict) -> None:
    data.pop("bench_client", None)


def test_pool_box_of_the_deployed_reference_topology(sim, transactional_db, make_user, run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.telemetry.services import deployment_scrape
    from simcluster.engine.poolconfig import SEGMENT_DIVISOR, SIM_SEGMENT_CAP
    from tests.deployments.simdeploy import topology_yaml
    from tests.telemetry.spanning_sim import share_a_prefix

    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name="pool-box", cluster=cluster, user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=no_bench))
    try:
        job = run_job_now(deployment_deploy, deployment, operator)
        assert job.status == "successful", job.explanation

        def scrape():
            return deployment_scrape(deployment, list(Process.objects.filter(deployment=deployment, state="running")))

        # One store client per engine process (p0, p1; d0 and d1 four external DP ranks each), each lending the
        # simulator's share of mooncake.json's global_segment_size (1GB).
        segment = min((1 << 30) // SEGMENT_DIVISOR, SIM_SEGMENT_CAP)
        pool = scrape()["services"]["kv-pool"]
        assert pool["status"] == "ok" and pool["empty_reason"] == "", pool
        assert (pool["segments"], pool["active_clients"], pool["total_bytes"]) == (10, 10, 10 * segment), pool
        address = {n["name"]: n["address"] for n in sim["spec"]["nodes"]}
        assert {h: s["segments"] for h, s in pool["segment_hosts"].items()} == {
            address["node0"]: 1, address["node1"]: 1, address["node2"]: 4, address["node3"]: 4}, pool

        pool = share_a_prefix(deployment, scrape)["services"]["kv-pool"]
        assert pool["key_count"] > 0 and pool["allocated_bytes"] > 0, pool
        assert sum(s["allocated_bytes"] for s in pool["segment_hosts"].values()) == pool["allocated_bytes"]
        print(f"\npool: {pool['key_count']:.0f} keys, {pool['allocated_bytes']:.0f} B of {pool['total_bytes']:.0f} B "
              f"in {pool['segments']} segments on {len(pool['segment_hosts'])} hosts")
    finally:
        stopped = run_job_now(deployment_stop, deployment, operator)
        assert stopped.status == "successful", stopped.explanation
