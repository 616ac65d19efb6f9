"""Issue 12's health policy on the simulated cluster (127.0.10.50-.53): a 1P1D topology deployed for real, its
Decode engine killed with SIGKILL; the scrape rounds see it unhealthy, the auto-restart job (drain, restart, wait
healthy, undrain) brings it back, and the next round sees it healthy with its restarts reset."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.deployments.simdeploy import run_job_now
from tests.telemetry.health_sim import (
    import_inventory,
    start_cluster,
    stop_cluster,
    topology_yaml,
    wait_until,
)

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]


@pytest.fixture(scope="module")
def sim():
    state_dir, state = start_cluster()
    try:
        yield state
    finally:
        stop_cluster(state_dir)


def test_a_killed_engine_goes_unhealthy_and_the_auto_restart_brings_it_back(sim, transactional_db, make_user,
                                                                             run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job
    from apps.telemetry.health.probe import probe
    from apps.telemetry.models import HealthEvent, HealthPolicy, InstanceHealth
    from apps.telemetry.services import deployment_scrape

    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name="health-sim", cluster=cluster, user=operator, yaml_text=topology_yaml(run_dir))
    try:
        job = run_job_now(deployment_deploy, deployment, operator)
        assert job.status == "successful", job.explanation
        HealthPolicy.objects.create(deployment=deployment, auto_restart=True, unhealthy_rounds=2, backoff_s=5,
                                    max_restarts=2)

        def a_round():
            rows = list(Process.objects.filter(deployment=deployment, state="running"))
            return deployment_scrape(deployment, rows)["health"]

        first = a_round()
        assert {k: v["state"] for k, v in first.items()} == {"p0": "healthy", "d0": "healthy", "proxy": "healthy"}

        d0 = Process.objects.get(deployment=deployment, instance="d0")
        os.kill(d0.pid, signal.SIGKILL)
        wait_until(lambda: not probe(d0.health_url)[0], timeout=10, what="d0 not answering /health")

        bad = a_round()
        assert bad["d0"]["state"] == "unhealthy" and "d0-dp0 health unreachable" in bad["d0"]["reason"]
        assert bad["p0"]["state"] == "healthy" and not Job.objects.filter(kind="restart").exists()
        second = a_round()
        restart = Job.objects.get(kind="restart")
        assert restart.params["instance"] == "d0" and restart.created_by is None
        assert second["d0"]["restart_job"] == restart.pk and second["d0"]["restarts"] == 1

        t0 = time.monotonic()
        run_job(restart.pk)  # what the ssh worker does with it
        took = time.monotonic() - t0
        restart.refresh_from_db()
        assert restart.status == "successful", restart.explanation
        d0_after = Process.objects.get(deployment=deployment, instance="d0")
        assert d0_after.state == "running" and d0_after.pid != d0.pid

        back = a_round()
        assert back["d0"]["state"] == "healthy", back["d0"]
        print(f"\nd0 killed: {bad['d0']['reason']}; auto-restart job #{restart.pk} took {took:.1f} s")
        row = InstanceHealth.objects.get(deployment=deployment, subject="d0")
        assert row.restarts == 0 and row.restart_job_id == restart.pk
        moves = list(HealthEvent.objects.filter(deployment=deployment, subject="d0").order_by("at", "id")
                     .values_list("from_state", "to_state", "job_id"))
        assert moves == [("", "healthy", None), ("healthy", "unhealthy", None), ("unhealthy", "unhealthy", restart.pk),
                         ("unhealthy", "healthy", None)]
        events = restart.events.values_list("text", flat=True)
        assert any("drain" in t for t in events) and any("undrain" in t for t in events)
    finally:
        stopped = run_job_now(deployment_stop, deployment, operator)
        assert stopped.status == "successful", stopped.explanation
