"""Issue 11's finish line for telemetry, on the simulated cluster (127.0.10.244-.249): the reference topology with a
Mooncake pool, p0 over node0 and node1 (internal DP, node1 headless) and d0 over node2 and node3 (external DP),
deployed with the vllm-ascend rendering; two scrape rounds around requests that share a prefix put the pool's hits
in the live state and the topology snapshot, the spanning instances drawn over their nodes."""

from __future__ import annotations

import pytest

from tests.deployments.simdeploy import cluster_fixture, import_inventory, run_job_now
from tests.telemetry.spanning_sim import share_a_prefix, spanning

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]
FIRST = 244


sim = cluster_fixture(FIRST)


def test_pool_hits_of_a_spanning_deployment_reach_the_live_state_and_the_picture(sim, transactional_db, make_user,
                                                                                  run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.telemetry.scrape import OK
    from apps.telemetry.services import deployment_scrape
    from apps.telemetry.topology_snapshot import topology_snapshot
    from tests.deployments.simdeploy import topology_yaml

    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name="pool-live", cluster=cluster, user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=spanning))
    try:
        job = run_job_now(deployment_deploy, deployment, operator)
        assert job.status == "successful", job.explanation

        def scrape():
            rows = list(Process.objects.filter(deployment=deployment, state="running"))
            return deployment_scrape(deployment, rows)

        first = scrape()
        targets = {t["key"]: t["status"] for t in first["targets"]}
        # The headless p0-n1 has no API server: not a target; p0's head and every d0 rank and the master are.
        assert "p0-n1" not in targets and targets["p0"] == OK and targets["kv-pool"] == OK
        assert [targets[f"d0-dp{r}"] for r in range(8)] == [OK] * 8

        live = share_a_prefix(deployment, scrape)

        pool = live["services"]["kv-pool"]
        assert pool["status"] == OK and pool["key_count"] > 0 and pool["puts"] > 0, pool
        assert pool["lookups"] > 0 and pool["loads"] > 0 and pool["lookup_s"] is not None, pool
        p0 = live["instances"]["p0"]
        assert p0["connector_hit_rate_total"] > 0 and live["pool"]["hit_rate_total"] == p0["connector_hit_rate_total"]
        print(f"\npool: {pool['key_count']:.0f} keys, {pool['lookups']:.0f} looked up, {pool['loads']:.0f} loaded; "
              f"Prefill connector hits {p0['connector_hit_rate_total']:.0%} since start")

        snap = topology_snapshot(deployment)
        insts = {i["name"]: i for i in snap["instances"]}
        assert insts["p0"]["nodes"] == ["node0", "node1"] and insts["d0"]["nodes"] == ["node2", "node3"]
        assert [s["headless"] for s in insts["p0"]["slices"]] == [False, True]
        assert {n["name"]: (n["span"] or {}).get("instance") for n in snap["nodes"] if n["dies"]} == {
            "node0": "p0", "node1": "p0", "node2": "d0", "node3": "d0"}
        assert snap["live"]["services"]["kv-pool"]["loads"] == pool["loads"]
        assert snap["live"]["pool"]["master"] == "kv-pool"
    finally:
        stopped = run_job_now(deployment_stop, deployment, operator)
        assert stopped.status == "successful", stopped.explanation
