"""Redis (channel layer, cache, Celery broker) killed and started again mid-deploy, with a browser on the job page.

The whole stack runs on a redis-server of the test's own (stack_procs.RedisServer: no persistence, so the restart
loses every key, queue and channel group, as a crash does): daphne and a Celery worker on the test database, the
simulated cluster on 127.0.10.25-.29, Debian's Chromium through Playwright. Held: the page's websocket closes and
reconnects by itself, the page ends up showing every JobEvent of the job in counter order with no gap and no
duplicate (job-live.js backfills by counter over REST), the deploy ends successful, and the worker, back on the new
broker, runs the next job (a stop) to success."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.deployments.simdeploy import cluster_fixture, processes_mentioning, topology_yaml
from tests.e2e.pages import logged_in_page
from tests.reliability.stack_procs import RedisServer, live_stack, wait_until

pytestmark = [pytest.mark.procs,
              pytest.mark.reliability, pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]

FIRST = 25  # node0 .25 ... proxy .29 (no bench node)
PASSWORD = "reliability-password-123"
REDIS_DOWN_S = 3.0
JOB_BOUND_S = 180
COMMAND = 'make reliability PYTEST_ARGS="-k test_redis_restart"'

# Records every change of the page's websocket state (job-live.js sets #job[data-ws]) with the time it happened.
WATCH_WS = """() => {
  window.wsLog = [];
  const job = document.getElementById("job");
  const note = () => window.wsLog.push([Date.now(), job.dataset.ws || ""]);
  note();
  new MutationObserver(note).observe(job, {attributes: true, attributeFilter: ["data-ws"]});
}"""


sim = cluster_fixture(FIRST, without=("bench",))


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def deployment(sim, transactional_db, run_dir):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import

    def slow_engines(data):
        del data["bench_client"], data["kv_pool"]  # the KV pool's master is not what this case is about
        for inst in data["instances"]:
            inst["env"]["SIMCLUSTER_STARTUP_S"] = "4"  # the engines' health wait is when Redis goes

    inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
    operator = get_user_model().objects.create_user("ops", password=PASSWORD)
    set_role(operator, Role.OPERATOR)
    return deployment_create(name="redis-restart", cluster=Cluster.objects.get(name="reference"), user=operator,
                             yaml_text=topology_yaml(run_dir, edit=slow_engines))


def finished(job_id: int):
    from apps.jobs.models import Job

    job = Job.objects.get(pk=job_id)
    return job if job.is_finished else None


def test_redis_restart_mid_deploy_the_page_reconnects_and_shows_every_event(deployment, redis, browser, settings,
                                                                            tmp_path, run_dir, figure):
    from playwright.sync_api import expect

    from apps.deployments.services import deployment_deploy, deployment_stop
    from apps.jobs.models import JobEvent

    params = {"health_timeout": 60, "stop_grace": 3}
    with live_stack(redis, settings, tmp_path) as (base, procs):
        page, errors = logged_in_page(browser, base, user="ops", password=PASSWORD)
        job = deployment_deploy(deployment=deployment, user=deployment.created_by, params=params)
        page.goto(f"{base}/jobs/{job.pk}/")
        page.evaluate(WATCH_WS)
        page.wait_for_selector("#job[data-ws=open]", state="attached", timeout=15000)

        wait_until(lambda: JobEvent.objects.filter(job=job, text__startswith="stage engines:").exists(), 120,
                   "the deploy to start its engines")
        events_before = JobEvent.objects.filter(job=job).count()
        went_down = time.monotonic()
        redis.restart(down_seconds=REDIS_DOWN_S)
        came_back = time.monotonic()
        reopened = wait_until(lambda: page.evaluate(
            "() => { const i = window.wsLog.findIndex(([, s]) => s === 'closed');"
            " return i >= 0 && window.wsLog.slice(i).some(([, s]) => s === 'open'); }"), 60,
            "the page's websocket to close and open again")
        reconnected_after = time.monotonic() - came_back

        done = wait_until(lambda: finished(job.pk), JOB_BOUND_S, "the deploy to end", tick=0.5)
        job_seconds = time.monotonic() - went_down
        expect(page.locator("#job")).to_have_attribute("data-status", done.status, timeout=30000)
        db_events = list(JobEvent.objects.filter(job=job).order_by("counter").values_list("counter", "text"))
        expect(page.locator("#log span")).to_have_count(len(db_events), timeout=30000)
        shown = page.evaluate("() => [...document.querySelectorAll('#log span')].map("
                              "s => [Number(s.dataset.counter), s.textContent])")
        ws_log = page.evaluate("() => window.wsLog")

        assert reopened
        assert done.status == "successful", done.explanation
        assert [c for c, _ in db_events] == list(range(1, len(db_events) + 1))
        assert [c for c, _ in shown] == [c for c, _ in db_events]  # every event, in order, no gap, no duplicate
        assert all(text.endswith(f"{db_text}\n") for (_, text), (_, db_text) in zip(shown, db_events, strict=True))
        assert not errors, errors

        # The worker lost its broker while the deploy ran (its queues went with Redis): it must take the next job.
        t0 = time.monotonic()
        stop = deployment_stop(deployment=deployment, user=deployment.created_by, params=params)
        stopped = wait_until(lambda: finished(stop.pk), 90, "the stop job queued after the restart to end", tick=0.5)
        stop_seconds = time.monotonic() - t0
        assert stopped.status == "successful", stopped.explanation
        assert not processes_mentioning(run_dir)
        worker_log = (tmp_path / "worker.log").read_text()
        closes = sum(1 for _, state in ws_log if state == "closed")
        lost_broker = bool(re.search(r"[Cc]onnection to broker lost", worker_log))

    figure("redis-restart-mid-deploy",
           held="the job page's websocket closed and reopened by itself; the page shows all JobEvents of the deploy "
                "in counter order, no gap, no duplicate, same text as the database; the deploy ended successful; "
                "the worker took the next job (a stop, queued on the new Redis) and it succeeded; nothing left running",
           figure=f"Redis killed and restarted {REDIS_DOWN_S:g}s later (empty) at event {events_before}: page "
                  f"reconnected {reconnected_after:.1f}s after Redis came back ({closes} closes); "
                  f"{len(db_events)}/{len(db_events)} events shown; deploy successful {job_seconds:.0f}s after the kill; "
                  f"stop job queued after the restart ran in {stop_seconds:.1f}s"
                  f"{'; the worker logged the lost broker and reconnected' if lost_broker else ''}",
           command=COMMAND,
           values={"redis_down_s": REDIS_DOWN_S, "events_before_kill": events_before, "events": len(db_events),
                   "events_shown": len(shown), "ws_closes": closes, "reconnect_s": round(reconnected_after, 2),
                   "deploy_end_after_kill_s": round(job_seconds, 1), "next_job_s": round(stop_seconds, 1),
                   "worker_logged_broker_lost": lost_broker})
