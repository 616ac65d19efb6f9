"""The control plane host rebooted in the middle of a deploy: daphne, the Celery worker and beat all SIGKILLed at
once, then started again as fresh processes on the same database. The deploy is swept as soon as the new worker
starts (its pid is dead on this host), the deployment's rows are read back from the nodes and match what runs
there, and a stop then leaves nothing running on the nodes.

The control plane runs as real processes (tests/reliability/stack_procs.py) on the test database and a Redis of its
own, against the simulated cluster on 127.0.10.30-.35."""

import time

import pytest

import tests.reliability.lost_jobs as lost_jobs
from tests.deployments.simdeploy import processes_mentioning
from tests.reliability.lost_jobs import (
    HEARTBEAT_TIMEOUT_S,
    corrected_rows,
    make_deployment,
    refresh_matches_nodes,
    start_job,
    stop_leaves_nothing,
    wait_job,
    wait_until_engines_started,
)
from tests.reliability.node_truth import running_on_nodes

pytestmark = [pytest.mark.procs,
              pytest.mark.reliability, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]
sim, inventory, cp, operator = lost_jobs.sim, lost_jobs.inventory, lost_jobs.cp, lost_jobs.operator  # fixtures


def test_after_a_reboot_the_lost_deploy_is_swept_and_the_rows_are_read_back(cp, inventory, operator, run_dir,
                                                                            figure):
    from apps.jobs.models import Job

    cp.start_all()
    deployment = make_deployment(inventory, operator, run_dir, "rebooted")
    job_id = start_job(cp, operator.token, deployment, "deploy")
    wait_until_engines_started(deployment, job_id)
    lost = Job.objects.get(pk=job_id).worker
    killed_at = cp.kill("web", "worker", "beat")  # the reboot: nothing of the control plane survives
    left_running = running_on_nodes(run_dir)
    assert left_running and Job.objects.get(pk=job_id).status == "running"

    cp.start_web()
    cp.start_worker()
    up_at = time.time()  # the new worker is ready: its start sweep has run
    cp.start_beat()
    status, body = cp.api(operator.token, "GET", f"/api/jobs/{job_id}/?wait=30")
    assert status == 200, body
    job = wait_job(job_id, timeout=HEARTBEAT_TIMEOUT_S * 3)
    assert job.status == "failed" and f"({lost}) is gone" in job.explanation, job.explanation
    assert job.finished.timestamp() <= up_at + HEARTBEAT_TIMEOUT_S
    refresh = refresh_matches_nodes(deployment, run_dir, after_job=job_id)
    corrected = corrected_rows(refresh)

    stop_s = stop_leaves_nothing(cp, operator.token, deployment, run_dir)
    assert not processes_mentioning(run_dir)
    assert not deployment.processes.filter(state="running").exists()
    figure("control-plane-rebooted",
           held="the deploy caught mid-way was marked failed naming the lost worker when the new worker started; the "
                "refresh's rows matched the pid files and /proc on the nodes; a stop then left no process of the "
                "deployment on the nodes",
           figure=f"swept {job.finished.timestamp() - killed_at:.1f} s after the SIGKILL of all 3 processes "
                  f"({job.finished.timestamp() - up_at:+.1f} s from the new worker's ready); {len(left_running)} "
                  f"running processes read back ({corrected} rows corrected); stop left 0 running in "
                  f"{stop_s:.1f} s",
           command='make reliability PYTEST_ARGS="-k test_control_plane_reboot"',
           values={"swept_after_kill_s": round(job.finished.timestamp() - killed_at, 2),
                   "swept_after_up_s": round(job.finished.timestamp() - up_at, 2), "rows_read": len(left_running),
                   "corrected": corrected, "refresh": refresh.explanation, "stop_s": round(stop_s, 1),
                   "left_running_after_stop": len(running_on_nodes(run_dir))})
