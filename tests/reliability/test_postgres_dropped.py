"""PostgreSQL's connections to this test's database terminated (pg_terminate_backend, as a database restart or a
failover does to its clients) while daphne serves API requests, and while a deploy job runs.

Held: no request hangs; those caught by the drop get the API's JSON 500 (a message and a reference, no traceback
page); requests after it succeed with the same daphne, never restarted (light: runs in `make test`). A deploy whose
connection is terminated while it waits on its engines ends 'error' saying the database connection failed, after
its cleanup stopped what it had started (marked reliability: it brings up the simulated cluster)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests

from tests.reliability.stack_procs import RedisServer, stack_env, start_daphne, stop

pytestmark = [pytest.mark.procs, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

REQUEST_TIMEOUT_S = 15
DROP_SECONDS = 3.0  # every connection terminated, again every DROP_EVERY_S, for this long
DROP_EVERY_S = 0.05
FIRST = 25  # the job case's simulated cluster: node0 .25 ... proxy .29
COMMAND = 'make test PYTEST_ARGS="tests/reliability/test_postgres_dropped.py"'


def terminate_backends() -> int:
    """Every other connection to this test's own database (never another database's)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.fixture
def token(make_user):
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=make_user("viewer", "watcher")).key


class Client(threading.Thread):
    """GETs url back to back until told to stop; keeps (sent at, status, content type, body head, seconds)."""

    def __init__(self, url: str, token: str):
        super().__init__(daemon=True)
        self.url, self.headers = url, {"Authorization": f"Token {token}"}
        self.done = threading.Event()
        self.results: list[tuple[float, int, str, str, float]] = []

    def run(self):
        session = requests.Session()
        while not self.done.is_set():
            t0 = time.monotonic()
            try:
                r = session.get(self.url, headers=self.headers, timeout=REQUEST_TIMEOUT_S)
                self.results.append((t0, r.status_code, r.headers.get("Content-Type", ""), r.text[:300],
                                     time.monotonic() - t0))
            except requests.RequestException as exc:
                self.results.append((t0, 0, "", f"{type(exc).__name__}: {exc}"[:300], time.monotonic() - t0))


def test_api_requests_fail_cleanly_while_backends_are_terminated_and_recover(token, tmp_path, figure):
    import json

    from django.db import connection

    assert connection.vendor == "postgresql", "this case terminates PostgreSQL backends"
    redis = RedisServer(tmp_path / "redis").start()
    web, port = start_daphne(stack_env(redis.url(), "pdcp-pg-dropped", DEBUG="0"), tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    clients = [Client(f"{base}/api/jobs/", token), Client(f"{base}/api/deployments/", token)]
    try:
        for c in clients:
            c.start()
        deadline = time.monotonic() + 60
        while not all(sum(r[1] == 200 for r in c.results) >= 3 for c in clients):  # warmed up, answering
            assert time.monotonic() < deadline, [c.results[-3:] for c in clients]
            time.sleep(0.1)
        killed, rounds, drop_start = 0, 0, time.monotonic()
        while time.monotonic() < drop_start + DROP_SECONDS:
            killed += terminate_backends()
            rounds += 1
            time.sleep(DROP_EVERY_S)
        drop_end = time.monotonic()
        time.sleep(3)
    finally:
        for c in clients:
            c.done.set()
        for c in clients:
            c.join(REQUEST_TIMEOUT_S + 5)
        stop(web)
        redis.stop()
    results = sorted(r for c in clients for r in c.results)
    before = [r for r in results if r[0] + r[4] < drop_start]  # ended before the first termination
    during = [r for r in results if r[0] + r[4] >= drop_start and r[0] <= drop_end]
    after = [r for r in results if r[0] > drop_end + 0.5]
    failed = [r for r in results if r[1] != 200]

    assert killed and failed  # the drop hit requests in flight, or the case proved nothing
    assert before and during and after
    assert all(r[1] == 200 for r in before)
    assert max(r[4] for r in results) < REQUEST_TIMEOUT_S  # none hung
    for _, status, content_type, body, _ in failed:
        assert status >= 500 and content_type.startswith("application/json"), (status, content_type, body)
        assert json.loads(body)["detail"] and "Traceback" not in body
    assert after and all(r[1] == 200 for r in after), [r for r in after if r[1] != 200][:3]
    assert "Traceback" not in "".join(r[3] for r in results)
    figure("postgres-backends-dropped",
           held="daphne serving /api/jobs/ and /api/deployments/ back to back (2 clients) while every connection to "
                f"the test database was terminated every {DROP_EVERY_S:g}s for {drop_end - drop_start:.1f}s ({rounds} "
                "rounds): no request hung, each "
                "failed one a JSON 500 with a reference, every request after the drop 200, same daphne process",
           figure=f"{len(during)} requests during the drop, {len(failed)} failed (JSON 5xx), {killed} backends "
                  f"terminated; {len(after)}/{len(after)} after it succeeded; slowest request "
                  f"{max(r[4] for r in results):.2f}s",
           command=COMMAND,
           values={"requests": len(results), "during_drop": len(during), "failed": len(failed),
                   "after_drop_ok": len(after), "backends_terminated": killed, "rounds": rounds,
                   "slowest_s": round(max(r[4] for r in results), 3)})


@pytest.mark.reliability
@pytest.mark.usefixtures("no_celery")
def test_a_deploy_running_when_backends_are_terminated_ends_and_leaves_nothing_unknown(make_user, run_dir, figure):
    from django.db import connections

    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.jobs.models import Job, JobEvent
    from apps.jobs.runner import run_job
    from tests.deployments.simdeploy import processes_mentioning, start_cluster, stop_cluster, topology_yaml

    def slow(data):
        del data["bench_client"], data["kv_pool"]  # the KV pool's master is not what this case is about
        for inst in data["instances"]:
            inst["env"]["SIMCLUSTER_STARTUP_S"] = "4"

    state_dir, state = start_cluster(FIRST, without=("bench",))
    try:
        inventory_import(Path(state["inventory"]).read_text(), allow_key_files=True)
        user = make_user("operator", "op")
        deployment = deployment_create(name="pg-dropped", cluster=Cluster.objects.get(name="reference"), user=user,
                                       yaml_text=topology_yaml(run_dir, edit=slow))
        job = deployment_deploy(deployment=deployment, user=user, params={"health_timeout": 60, "stop_grace": 3})

        def work():
            try:
                run_job(job.pk)
            except Exception as exc:  # what escapes the runner (the job then stays 'running') is measured
                crashed.append(exc)
            finally:
                connections.close_all()

        crashed: list[Exception] = []
        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not JobEvent.objects.filter(job=job, text__startswith="waiting up to").exists():  # on the engines
            assert time.monotonic() < deadline and thread.is_alive(), Job.objects.get(pk=job.pk).explanation
            time.sleep(0.1)
        dropped_at = time.monotonic()
        killed = terminate_backends()
        thread.join(120)
        hung = thread.is_alive()
        seconds = time.monotonic() - dropped_at
        job.refresh_from_db()
        rows = {r.key: r.state for r in Process.objects.filter(deployment=deployment)}
        assert not hung
        assert not crashed, crashed  # the runner itself recorded how the job ended
        assert job.status == "error" and "the database connection failed mid-job" in job.explanation, job.explanation
        assert not processes_mentioning(run_dir)  # its cleanup stopped what it had started
        assert set(rows.values()) == {"stopped"}, rows
        stopped = Job.objects.get(pk=deployment_stop(deployment=deployment, user=user, params={"stop_grace": 3}).pk)
        run_job(stopped.pk)
        stopped.refresh_from_db()
        assert stopped.status == "successful", stopped.explanation
        assert not processes_mentioning(run_dir)
    finally:
        stop_cluster(state_dir)
    figure("postgres-backends-dropped-mid-job",
           held="a deploy waiting on its engines' health when every connection to the database was terminated: the "
                "job ended 'error' saying the database connection failed (not stuck running until the sweep), its "
                "cleanup stopped what it had started (rows stopped, nothing on the nodes); a stop afterwards succeeded",
           figure=f"{killed} backends terminated; job {job.status} {seconds:.1f}s later: {job.explanation[:160]}",
           command='make reliability PYTEST_ARGS="-k test_postgres_dropped"',
           values={"backends_terminated": killed, "seconds_to_end": round(seconds, 2), "status": job.status})
