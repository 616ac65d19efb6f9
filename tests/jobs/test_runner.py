"""The job machinery: status machine, events with a monotonic counter, cancel, and the sweep of lost workers."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.choices import JobKind, JobStatus
from apps.jobs.context import JobFailed
from apps.jobs.models import Job, JobEvent
from apps.jobs.registry import HANDLERS
from apps.jobs.runner import run_job
from apps.jobs.services import job_cancel, job_transition, sweep_orphaned_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(node):
    return Job.objects.create(kind=JobKind.PREFLIGHT, target_type="inventory.node", target_id=node.pk,
                              target_label="node0")


@pytest.fixture
def handler(monkeypatch):
    def install(fn):
        monkeypatch.setitem(HANDLERS, JobKind.PREFLIGHT, fn)

    return install


def test_successful_job_records_events_in_order(job, handler):
    def work(ctx):
        for i in range(5):
            ctx.log(f"line {i}", node="node0")
        ctx.summary = "all good"

    handler(work)
    run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCESSFUL and job.explanation == "all good"
    assert job.started and job.finished and job.worker
    assert list(JobEvent.objects.filter(job=job).values_list("counter", "text")) == [
        (i + 1, f"line {i}") for i in range(5)]
    assert job.event_count == 5


def test_failure_and_crash_are_told_apart(job, node, handler):
    handler(lambda ctx: (_ for _ in ()).throw(JobFailed("npu 3 is in Alarm")))
    run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.explanation == "npu 3 is in Alarm"

    other = Job.objects.create(kind=JobKind.PREFLIGHT, target_type="inventory.node", target_id=node.pk)
    handler(lambda ctx: {}["missing"])
    run_job(other.pk)
    other.refresh_from_db()
    assert other.status == JobStatus.ERROR and "KeyError" in other.explanation
    assert "Traceback" not in other.explanation


def test_a_job_runs_once(job, handler):
    calls = []
    handler(lambda ctx: calls.append(1))
    run_job(job.pk)
    run_job(job.pk)  # a redelivered task (acks_late) must not run the work again
    assert calls == [1]


def test_cancel_before_start(job, make_user):
    job_cancel(job, user=make_user("operator"))
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELED and "before it started" in job.explanation
    run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELED


@pytest.mark.django_db(transaction=True)  # the heartbeat thread has its own connection: it must see the flag
def test_cancel_while_running_is_seen_by_the_handler(job, handler, monkeypatch):
    monkeypatch.setattr("apps.jobs.runner.HEARTBEAT_SECONDS", 0.05)

    def work(ctx):
        Job.objects.filter(pk=ctx.job.pk).update(cancel_requested=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ctx.check_cancel()
            time.sleep(0.02)
        raise AssertionError("the cancel flag never arrived")

    handler(work)
    run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELED


def test_finished_jobs_do_not_move(job):
    assert job_transition(job, JobStatus.RUNNING)
    assert job_transition(job, JobStatus.SUCCESSFUL)
    assert not job_transition(job, JobStatus.FAILED)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCESSFUL


def test_sweep_marks_silent_running_jobs_failed_with_a_reason(job, settings):
    settings.JOB_HEARTBEAT_TIMEOUT_SECONDS = 30
    job_transition(job, JobStatus.RUNNING, worker="elsewhere:123")
    Job.objects.filter(pk=job.pk).update(heartbeat=timezone.now() - timedelta(seconds=31))
    fresh = Job.objects.create(kind=JobKind.PREFLIGHT, target_type="inventory.node", target_id=1)
    job_transition(fresh, JobStatus.RUNNING, worker="elsewhere:124")
    assert sweep_orphaned_jobs() == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "elsewhere:123" in job.explanation and "gone" in job.explanation


WORKER = """
import os, sys, django
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
django.setup()
from django.db import connections
from apps.jobs.registry import HANDLERS
from apps.jobs.runner import run_job
import time
def hang(ctx):
    ctx.log("working")
    time.sleep(60)
HANDLERS["preflight"] = hang
run_job(int(sys.argv[1]))
"""


@pytest.mark.procs
@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_leaves_no_job_running_forever(node):
    """A real process runs the job and is SIGKILLed; the worker-start sweep marks the job failed."""
    job = Job.objects.create(kind=JobKind.PREFLIGHT, target_type="inventory.node", target_id=node.pk)
    env = {**os.environ}
    from django.db import connection

    env["DATABASE_URL"] = _database_url(connection.settings_dict)
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(job.pk)], env=env, cwd=os.getcwd())
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not JobEvent.objects.filter(job=job).exists():
            time.sleep(0.1)
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert sweep_orphaned_jobs(local_dead_only=True) == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and str(proc.pid) in job.explanation


def _database_url(d) -> str:
    if "sqlite" in d["ENGINE"]:
        return f"sqlite:///{d['NAME']}"
    return f"postgres://{d['USER']}@{d['HOST']}:{d['PORT']}/{d['NAME']}"


def test_cancel_of_a_running_job_only_raises_the_flag(job, make_user):
    job_transition(job, JobStatus.RUNNING, worker="w:1")
    job_cancel(job, user=make_user("operator"))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.cancel_requested  # the worker stops it and says what it stopped


def test_event_text_with_nul_bytes_is_stored(job):
    from apps.jobs.services import job_event_add

    event = job_event_add(job, 1, text="before\x00after")
    assert JobEvent.objects.get(pk=event.pk).text == "before\\0after"


def test_events_endpoint_rejects_a_counter_that_is_not_a_number(api_client_for, job):
    client = api_client_for("viewer")
    for bad in ("²", "--5", "x"):
        response = client.get(f"/api/jobs/{job.pk}/events/?counter__gt={bad}")
        assert response.status_code == 400, bad


@pytest.mark.django_db(transaction=True)
def test_heartbeat_survives_a_failed_beat(job, handler, monkeypatch):
    from apps.jobs import context

    monkeypatch.setattr("apps.jobs.runner.HEARTBEAT_SECONDS", 0.05)
    calls = {"n": 0}
    real = context.JobContext._poll_cancel_and_beat

    def flaky(self):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database restarting")
        return real(self)

    monkeypatch.setattr(context.JobContext, "_poll_cancel_and_beat", flaky)

    def work(ctx):
        deadline = time.monotonic() + 5
        while calls["n"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)

    handler(work)
    run_job(job.pk)
    assert calls["n"] >= 3  # the beat went on after its first failure


def test_a_log_line_costs_one_database_write(job):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.jobs.context import JobContext

    ctx = JobContext(job)
    with CaptureQueriesContext(connection) as queries:
        ctx.log("one line", node="node0")
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["INSERT"]
    ctx.flush_event_count()
    job.refresh_from_db()
    assert job.event_count == 1
