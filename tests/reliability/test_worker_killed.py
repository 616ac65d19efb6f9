"""A Celery worker SIGKILLed in the middle of a deploy (its engines started, the deploy waiting on their health),
with beat alive; and then with beat killed too and the only worker left on another host: the deploy ends failed
naming the lost worker within the heartbeat bound, a refresh job reads what really runs back into the rows, and the
next deploy reconciles (keeps what runs, starts the rest; one process per instance on the nodes).

The whole control plane runs as real processes (tests/reliability/stack_procs.py) on the test database and a Redis of
its own, against the simulated cluster on 127.0.10.30-.35."""

import time

import pytest

import tests.reliability.lost_jobs as lost_jobs
from tests.reliability.lost_jobs import (
    HEARTBEAT_TIMEOUT_S,
    corrected_rows,
    make_deployment,
    refresh_matches_nodes,
    running_pids,
    start_job,
    stop_leaves_nothing,
    wait_job,
    wait_until_engines_started,
)
from tests.reliability.node_truth import instances_per_process, rows_against_nodes

pytestmark = [pytest.mark.procs,
              pytest.mark.reliability, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]
SWEEP_S = HEARTBEAT_TIMEOUT_S / 2  # sweep_seconds() of apps/jobs/sweeper.py
sim, inventory, cp, operator = lost_jobs.sim, lost_jobs.inventory, lost_jobs.cp, lost_jobs.operator  # fixtures
COMMAND = 'make reliability PYTEST_ARGS="-k \'test_worker_killed and {}\'"'


def reads_back_and_reconciles(cp, operator, deployment, run_dir, lost_job: int) -> dict:
    """After the lost deploy was swept: the refresh's rows match the nodes, the next deploy keeps what runs and
    starts the rest, a stop leaves nothing. Returns the numbers."""
    refresh = refresh_matches_nodes(deployment, run_dir, after_job=lost_job)
    before = running_pids(deployment)
    started = time.monotonic()
    redeploy = wait_job(start_job(cp, operator.token, deployment, "deploy"), timeout=240)
    redeploy_s = time.monotonic() - started
    assert redeploy.status == "successful", redeploy.explanation
    assert f"{len(before)} kept" in redeploy.explanation, redeploy.explanation
    after = running_pids(deployment)
    assert {k: after[k] for k in before} == before  # kept, not started again
    assert set(instances_per_process(deployment).values()) == {1}, instances_per_process(deployment)
    assert not rows_against_nodes(deployment, run_dir)
    stop_leaves_nothing(cp, operator.token, deployment, run_dir)
    corrected = corrected_rows(refresh)
    return {"refresh": refresh.explanation, "rows_read": len(before), "corrected": corrected, "kept": len(before),
            "started": len(after) - len(before), "redeploy_s": round(redeploy_s, 1)}


def test_a_killed_worker_fails_its_deploy_and_the_next_deploy_reconciles(cp, inventory, operator, run_dir, figure):
    from apps.jobs.models import Job

    cp.start_all()
    deployment = make_deployment(inventory, operator, run_dir, "worker-killed")
    job_id = start_job(cp, operator.token, deployment, "deploy")
    wait_until_engines_started(deployment, job_id)
    lost = Job.objects.get(pk=job_id).worker
    killed_at = cp.kill("worker")
    cp.start_worker()  # on the same host: its start sweep knows the lost worker's pid is dead
    back_at = time.time()
    job = wait_job(job_id, timeout=HEARTBEAT_TIMEOUT_S * 3)
    swept_s = job.finished.timestamp() - killed_at
    assert job.status == "failed" and f"({lost}) is gone" in job.explanation, job.explanation
    assert job.finished.timestamp() <= back_at + HEARTBEAT_TIMEOUT_S
    numbers = reads_back_and_reconciles(cp, operator, deployment, run_dir, job_id)
    figure("celery-worker-killed",
           held="deploy failed naming the lost worker; the refresh's rows matched the pid files and /proc on the nodes; "
                "the next deploy kept what ran (same pids, one process tree per instance) and started the rest; stop "
                "left nothing",
           figure=f"swept {swept_s:.1f} s after the SIGKILL ({job.finished.timestamp() - back_at:+.1f} s from the "
                  f"restarted worker's ready), {numbers['rows_read']} running processes read back "
                  f"({numbers['corrected']} rows corrected), redeploy kept {numbers['kept']} and started "
                  f"{numbers['started']} in {numbers['redeploy_s']} s",
           command=COMMAND.format("fails_its_deploy"),
           values={"swept_after_kill_s": round(swept_s, 2), "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S, **numbers})


def test_with_beat_killed_too_a_worker_on_another_host_fails_the_deploy(cp, inventory, operator, run_dir, figure):
    from apps.jobs.models import Job

    cp.start_web()
    cp.start_worker(hostname="pdcp-cp-lost")  # the host that goes away
    cp.start_beat()
    deployment = make_deployment(inventory, operator, run_dir, "beat-killed")
    job_id = start_job(cp, operator.token, deployment, "deploy")
    wait_until_engines_started(deployment, job_id)
    lost = Job.objects.get(pk=job_id).worker
    assert lost.startswith("pdcp-cp-lost:")
    cp.procs["lost-worker"] = cp.procs.pop("worker")
    cp.start_worker()  # this host's, up before the other goes: only the heartbeat can tell it the job is lost
    killed_at = cp.kill("lost-worker", "beat")
    job = wait_job(job_id, timeout=HEARTBEAT_TIMEOUT_S * 4 + 30)
    silent_s = (job.finished - job.heartbeat).total_seconds()
    assert job.status == "failed" and f"({lost}) is gone" in job.explanation, job.explanation
    assert HEARTBEAT_TIMEOUT_S <= silent_s <= HEARTBEAT_TIMEOUT_S + SWEEP_S + 5, silent_s
    numbers = reads_back_and_reconciles(cp, operator, deployment, run_dir, job_id)
    figure("celery-beat-killed",
           held="with beat and the deploy's worker SIGKILLed and the only worker left on another host, the deploy failed "
                "naming the "
                "lost worker once its heartbeat was older than the timeout; the refresh's rows matched the nodes; the "
                "next deploy kept what ran and started the rest; stop left nothing",
           figure=f"failed {silent_s:.1f} s after its last heartbeat (timeout {HEARTBEAT_TIMEOUT_S} s, workers sweep "
                  f"every {SWEEP_S:g} s; {job.finished.timestamp() - killed_at:.1f} s after the SIGKILL), "
                  f"{numbers['rows_read']} running processes read back ({numbers['corrected']} rows corrected), redeploy "
                  f"kept {numbers['kept']} and started "
                  f"{numbers['started']} in {numbers['redeploy_s']} s",
           command=COMMAND.format("beat_killed"),
           values={"silent_s": round(silent_s, 2), "swept_after_kill_s": round(job.finished.timestamp() - killed_at, 2),
                   "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S, "sweep_s": SWEEP_S, **numbers})
