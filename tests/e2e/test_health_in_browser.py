"""Issue 12's "a killed engine goes red and comes back by itself", in Debian's Chromium: the 1P1D sim topology
(127.0.10.50-.53) deployed by the stack's ssh worker, a telemetry worker with beat scraping every 5 s, the auto-restart
policy on. The Decode engine is killed with SIGKILL; its box on the topology page turns unhealthy without a reload
within one scrape interval, then healthy again once the auto-restart job ran."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import E2E_REDIS, ROOT, stop
from tests.e2e.pages import SHOWN_MS, logged_in_page
from tests.telemetry.health_sim import import_inventory, start_cluster, stop_cluster, topology_yaml

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(420)]
SCRAPE_INTERVAL_S = 5.0


@pytest.fixture(scope="module")
def health_sim():
    state_dir, state = start_cluster()
    try:
        yield state
    finally:
        stop_cluster(state_dir)


@pytest.fixture
def telemetry_worker(live_stack, tmp_path, settings):
    """A Celery worker for the telemetry queue with beat inside it (scrape-live-state every 5 s), on the stack's
    database and Redis."""
    from django.db import connection

    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
           "REDIS_URL": E2E_REDIS, "PDCP_NAMESPACE": settings.PDCP_NAMESPACE, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "telemetry.log"
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-B",
                             "-s", str(tmp_path / "beat-schedule"), "-Q", f"{settings.PDCP_NAMESPACE}.telemetry",
                             # threads: the 30 s NPU poll (SSH) on this queue must not hold a scrape round back
                             "--pool=threads", "--concurrency=4", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
                            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(log.read_text()[-2000:])
            time.sleep(0.2)
        yield proc
    finally:
        stop(proc)


def wait_job(job, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.is_finished:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job #{job.pk} ({job.kind}) still {job.status} after {timeout} s")


def test_a_killed_engine_turns_red_on_the_page_and_comes_back_by_itself(live_stack, browser, health_sim, run_dir,
                                                                        telemetry_worker, tmp_path):
    from django.contrib.auth import get_user_model
    from playwright.sync_api import expect

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.jobs.models import Job
    from apps.telemetry.models import HealthEvent, HealthPolicy

    viewer = get_user_model().objects.create_user("watcher", password="e2e-password-123")
    set_role(viewer, Role.VIEWER)
    operator = get_user_model().objects.create_user("ops", password="e2e-password-123")
    set_role(operator, Role.OPERATOR)
    deployment = deployment_create(name="health-e2e", cluster=import_inventory(health_sim), user=operator,
                                   yaml_text=topology_yaml(run_dir))
    HealthPolicy.objects.create(deployment=deployment, auto_restart=True, unhealthy_rounds=2, backoff_s=5,
                                max_restarts=2)
    try:
        deployed = wait_job(deployment_deploy(deployment=deployment, user=operator,
                                              params={"health_timeout": 30, "stop_grace": 3}), 120)
        assert deployed.status == "successful", deployed.explanation

        page, errors = logged_in_page(browser, live_stack)
        page.goto(f"{live_stack}/deployments/{deployment.pk}/")
        d0 = page.locator("#topology .topo-instance[data-instance=d0]")
        expect(d0).to_have_attribute("data-health", "healthy", timeout=30000)
        expect(page.locator("#topology")).to_have_attribute("data-ws", "open", timeout=SHOWN_MS)
        link = page.locator("#topology a.instance-link:has(.topo-instance[data-instance=d0])")
        assert link.get_attribute("href") == f"/deployments/{deployment.pk}/instances/d0/"
        health = page.locator("#health-policy")  # the deployment page's health section, loaded by htmx
        expect(health.locator("#health-states")).to_be_visible()  # read once at load; the picture is the live view
        expect(health.locator("input[name=auto_restart]")).to_be_checked()
        expect(health.locator("input[name=backoff_s]")).to_be_disabled()  # a viewer reads the policy, an operator changes it
        page.evaluate("window.__sameDocument = true")

        pid = Process.objects.get(deployment=deployment, instance="d0").pid
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        expect(d0).to_have_attribute("data-health", "unhealthy", timeout=int(SCRAPE_INTERVAL_S * 1000) + 3000)
        seen_red = time.monotonic() - killed
        assert page.evaluate("window.__sameDocument") is True  # no reload
        expect(d0.locator(":scope > .state-label")).to_have_text("Unhealthy")
        assert d0.locator(":scope > rect").get_attribute("stroke") == "#c5221f"
        page.locator("#topology").screenshot(path=str(tmp_path / "d0-unhealthy.png"))

        expect(d0).to_have_attribute("data-health", "healthy", timeout=90000)
        back = time.monotonic() - killed
        assert page.evaluate("window.__sameDocument") is True
        restart = Job.objects.get(kind="restart")
        assert restart.status == "successful" and restart.created_by is None and restart.params["instance"] == "d0"
        assert Process.objects.get(deployment=deployment, instance="d0").pid != pid
        assert HealthEvent.objects.filter(deployment=deployment, subject="d0", job=restart).exists()
        print(f"\nd0 killed: red on the page after {seen_red:.1f} s (scrape interval {SCRAPE_INTERVAL_S:g} s), "
              f"green again after {back:.1f} s (auto-restart job #{restart.pk})")
        assert seen_red <= SCRAPE_INTERVAL_S + 1.5, seen_red
        assert errors == []
    finally:
        stop(telemetry_worker)  # no round (nor restart) while the deployment stops
        stopped = wait_job(deployment_stop(deployment=deployment, user=operator, params={"stop_grace": 3}), 120)
        assert stopped.status == "successful", stopped.explanation
