"""A script's view of a job: GET ?wait=N holds the answer until the job ends, a pending job says how long it has
waited and whether any worker consumes its queue, and the worker registry that says so, fed by a real Celery
worker started here (its own namespace, stopped by PID)."""

import os
import signal
import threading
import time
import uuid

import pytest

from apps.jobs.choices import JobKind, JobStatus
from apps.jobs.models import Job
from apps.jobs.workers import STALE_SECONDS, live_workers, queue_status, worker_gone, worker_seen
from tests.reliability.stack_procs import stack_env, start_worker, stop


def _job(user=None, status=JobStatus.PENDING, kind=JobKind.DISCOVER):
    return Job.objects.create(kind=kind, status=status, target_type="inventory.node", target_id=1,
                              target_label="node0", created_by=user)


@pytest.mark.parametrize("value", ["abc", "61", "-1", "2.5"])
def test_a_bad_wait_is_a_400_naming_wait(api_client_for, value, own_cache_prefix):
    client = api_client_for("viewer")
    job = _job()
    response = client.get(f"/api/jobs/{job.pk}/", {"wait": value})
    assert response.status_code == 400 and "wait" in response.content.decode()


def test_wait_answers_as_soon_as_the_job_ends(api_client_for, transactional_db, own_cache_prefix):
    client = api_client_for("viewer")
    job = _job(status=JobStatus.RUNNING)

    def finish():
        time.sleep(1.0)
        from django.db import connection

        Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCESSFUL, explanation="done")
        connection.close()

    threading.Thread(target=finish, daemon=True).start()
    began = time.monotonic()
    response = client.get(f"/api/jobs/{job.pk}/?wait=20")
    took = time.monotonic() - began
    assert response.status_code == 200 and response.json()["status"] == "successful"
    assert 0.9 <= took < 5, took


def test_wait_gives_up_after_the_time_and_answers_the_job_as_it_is(api_client_for, transactional_db,
                                                                    own_cache_prefix):
    client = api_client_for("viewer")
    job = _job()
    began = time.monotonic()
    response = client.get(f"/api/jobs/{job.pk}/?wait=1")
    assert 1 <= time.monotonic() - began < 4
    assert response.status_code == 200 and response.json()["status"] == "pending"


def test_a_finished_job_answers_at_once_and_carries_links(api_client_for, own_cache_prefix):
    client = api_client_for("viewer")
    job = _job(status=JobStatus.FAILED)
    began = time.monotonic()
    body = client.get(f"/api/jobs/{job.pk}/?wait=30").json()
    assert time.monotonic() - began < 2
    assert body["waiting"] is None
    assert body["links"]["job"] == f"/api/jobs/{job.pk}/" and body["links"]["events"] == f"/api/jobs/{job.pk}/events/"


def test_a_pending_job_with_no_worker_says_so_in_the_api_and_on_its_page(api_client_for, own_cache_prefix,
                                                                         settings, client, make_user):
    api = api_client_for("viewer")
    job = _job()
    waiting = api.get(f"/api/jobs/{job.pk}/").json()["waiting"]
    queue = settings.PDCP_QUEUES["ssh"]
    assert waiting["queue"] == queue and waiting["workers"] == 0 and waiting["pending_s"] >= 0
    assert f"no worker consumes queue {queue}" in waiting["message"] and "celery_queues ssh" in waiting["message"]
    assert api.get("/api/jobs/", {"status": "pending"}).json()["results"][0]["waiting"]["workers"] == 0

    client.force_login(make_user("viewer", "page-viewer"))
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"no worker consumes queue {queue}" in page


def test_a_list_of_pending_jobs_reads_the_worker_registry_once(api_client_for, own_cache_prefix, monkeypatch):
    from apps.jobs.api import serializers

    calls = []
    monkeypatch.setattr(serializers, "live_workers", lambda: calls.append(1) or [])
    for _ in range(3):
        _job()
    rows = api_client_for("viewer").get("/api/jobs/", {"status": "pending"}).json()["results"]
    assert [r["waiting"]["workers"] for r in rows] == [0, 0, 0] and len(calls) == 1


def test_a_worker_counts_while_fresh_and_a_stale_entry_is_dropped(own_cache_prefix, settings):
    ssh = settings.PDCP_QUEUES["ssh"]
    worker_seen("celery@a:1", [ssh])
    worker_seen("celery@b:2", [ssh], now=time.time() - STALE_SECONDS - 1)
    assert [w.name for w in live_workers()] == ["celery@a:1"]
    row = next(r for r in queue_status() if r["kind"] == "ssh")
    assert row["workers"] == 1 and row["names"] == ["celery@a:1"]
    worker_gone("celery@a:1")
    assert live_workers() == []


@pytest.fixture
def own_worker(transactional_db, settings, tmp_path):
    """A solo Celery worker (tests/reliability/stack_procs.py) on the ssh queue of a namespace of its own; this test
    reads the registry under that namespace."""
    import copy

    import redis

    namespace = f"pdcp-wt-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    caches = copy.deepcopy(settings.CACHES)
    caches["default"]["KEY_PREFIX"] = namespace
    settings.CACHES = caches
    settings.PDCP_QUEUES = {kind: f"{namespace}.{kind}" for kind in settings.PDCP_QUEUES}
    log = tmp_path / "worker.log"
    worker = start_worker(stack_env(namespace=namespace, DJANGO_SETTINGS_MODULE="controlplane.settings"), log,
                          f"{namespace}.ssh")
    try:
        yield worker, log
    finally:
        stop(worker, timeout=20)
        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = list(client.scan_iter(f"*{namespace}*", count=1000))
        if keys:
            client.delete(*keys)


def _until(predicate, seconds: float, worker, log):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        if worker.poll() is not None:
            raise AssertionError(log.read_text()[-3000:])
        time.sleep(0.2)
    return False


@pytest.mark.procs
def test_a_real_worker_registers_its_queue_and_withdraws_when_stopped(own_worker, api_client_for, settings):
    worker, log = own_worker
    ssh, evals = settings.PDCP_QUEUES["ssh"], settings.PDCP_QUEUES["evals"]

    def counts():
        return {row["queue"]: row["workers"] for row in queue_status()}

    assert _until(lambda: counts()[ssh] == 1, 40, worker, log), log.read_text()[-3000:]
    assert counts()[evals] == 0
    api = api_client_for("viewer")
    rows = {row["queue"]: row for row in api.get("/api/workers/").json()}
    assert rows[ssh]["workers"] == 1 and rows[ssh]["last_seen"] and rows[evals]["workers"] == 0
    evaluate = _job(kind=JobKind.EVALUATE)
    discover = _job()
    assert api.get(f"/api/jobs/{discover.pk}/").json()["waiting"]["workers"] == 1
    assert f"no worker consumes queue {evals}" in api.get(f"/api/jobs/{evaluate.pk}/").json()["waiting"]["message"]

    os.kill(worker.pid, signal.SIGTERM)
    worker.wait(timeout=20)
    assert counts()[ssh] == 0
