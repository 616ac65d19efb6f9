"""Health rounds against the database (apps/telemetry/health/record.py through services.deployment_scrape): states
kept per instance and service, every transition an event and a "system" audit entry, the auto-restart job started
after the bad rounds and recorded, a busy deployment held and said once, a stopped deployment ending stopped; the
API and the deployment page's form."""

from datetime import timedelta

import pytest
from django.utils import timezone

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_celery")]

ENGINE_PAGE = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
PROXY_PAGE = "# TYPE pdproxy_requests_total counter\npdproxy_requests_total 0\n"


class World:
    """Which processes answer: their health URL and their metrics page."""

    def __init__(self):
        self.dead: set[str] = set()

    def fetch(self, url):
        if any(f":{port}/" in url for port in self.dead):
            raise ConnectionError("connection failed: Connection refused")
        return PROXY_PAGE if ":1999/" in url else ENGINE_PAGE

    def probe(self, url):
        if any(f":{port}/" in url for port in self.dead):
            return False, "unreachable (connection refused)"
        return True, "HTTP 200"


@pytest.fixture
def world(monkeypatch):
    from apps.telemetry.health import record

    w = World()
    monkeypatch.setattr(record, "probe", w.probe)
    return w


def _row(deployment, key, role, instance, port, *, state="running", started=None):
    from apps.deployments.models import Process

    return Process.objects.create(
        deployment=deployment, revision=deployment.active_revision, node_name="x", role=role, instance=instance,
        key=key, address="127.0.0.1", ports=[port], health_url=f"http://127.0.0.1:{port}/health", command="x",
        fingerprint="x", log_path="/l", pid_file="/p", state=state,
        started_at=started or timezone.now() - timedelta(hours=1))


@pytest.fixture
def running(deployment):
    _row(deployment, "p0-dp0", "prefill", "p0", 7101)
    _row(deployment, "d0-dp0", "decode", "d0", 7102)
    _row(deployment, "proxy", "proxy", "", 1999)
    return deployment


def a_round(deployment, world, at):
    from apps.deployments.models import Process
    from apps.telemetry.services import deployment_scrape

    rows = list(Process.objects.filter(deployment=deployment, state="running"))
    return deployment_scrape(deployment, rows, fetch=world.fetch, now=lambda: at)["health"]


def states(deployment):
    from apps.telemetry.models import InstanceHealth

    return dict(InstanceHealth.objects.filter(deployment=deployment).values_list("subject", "state"))


def test_every_subject_gets_a_state_and_each_transition_an_event_and_an_audit_entry(running, world):
    from apps.audit.models import AuditEntry
    from apps.telemetry.models import HealthEvent

    t = timezone.now().timestamp()
    health = a_round(running, world, t)
    assert {k: v["state"] for k, v in health.items()} == {"p0": "healthy", "d0": "healthy", "proxy": "healthy"}
    assert health["p0"]["kind"] == "instance" and health["proxy"]["kind"] == "service"
    assert health["p0"]["colour"] == "green"
    a_round(running, world, t + 5)
    assert HealthEvent.objects.filter(deployment=running).count() == 3  # the second round changed nothing

    world.dead.add(7102)
    health = a_round(running, world, t + 10)
    assert health["d0"]["state"] == "unhealthy" and "d0-dp0 health unreachable" in health["d0"]["reason"]
    assert states(running) == {"p0": "healthy", "d0": "unhealthy", "proxy": "healthy"}
    event = HealthEvent.objects.filter(deployment=running, subject="d0").first()
    assert (event.from_state, event.to_state) == ("healthy", "unhealthy")
    entry = AuditEntry.objects.filter(action="health").first()
    assert entry.username == "system" and entry.user is None
    assert entry.object_repr == "reference/d0" and entry.changes["state"] == ["healthy", "unhealthy"]

    world.dead.discard(7102)
    assert a_round(running, world, t + 15)["d0"]["state"] == "healthy"
    assert HealthEvent.objects.filter(deployment=running, subject="d0").count() == 3


def test_health_ok_but_metrics_unreadable_is_degraded(running, world):
    def fetch(url):
        if ":7101/" in url:
            return "<html>oops</html>"
        return world.fetch(url)

    from apps.deployments.models import Process
    from apps.telemetry.services import deployment_scrape

    rows = list(Process.objects.filter(deployment=running))
    state = deployment_scrape(running, rows, fetch=fetch)
    assert state["health"]["p0"]["state"] == "degraded"
    assert "p0-dp0 garbled" in state["health"]["p0"]["reason"]


def test_auto_restart_starts_one_job_after_the_bad_rounds_and_records_it(running, world):
    from apps.jobs.models import Job
    from apps.telemetry.models import HealthEvent, HealthPolicy, InstanceHealth

    HealthPolicy.objects.create(deployment=running, auto_restart=True, unhealthy_rounds=2, backoff_s=30,
                                max_restarts=2)
    t = timezone.now().timestamp()
    a_round(running, world, t)
    world.dead.add(7101)
    a_round(running, world, t + 5)
    assert not Job.objects.exists()
    health = a_round(running, world, t + 10)
    job = Job.objects.get()
    assert job.kind == "restart" and job.params["instance"] == "p0" and job.created_by is None
    row = InstanceHealth.objects.get(deployment=running, subject="p0")
    assert row.restart_job_id == job.pk and row.restarts == 1 and row.bad_rounds == 0
    assert health["p0"]["restart_job"] == job.pk
    restart_event = HealthEvent.objects.filter(subject="p0", job=job).get()
    assert restart_event.reason.startswith("auto-restart 1 of 2 after 2 bad rounds")

    # While the job is pending: starting, and never a second job.
    for k in range(3):
        assert a_round(running, world, t + 15 + 5 * k)["p0"]["state"] == "starting"
    assert Job.objects.count() == 1

    # The job ended but p0 is still down: after 2 more bad rounds and the 30 s backoff, the second and last restart.
    Job.objects.filter(pk=job.pk).update(status="successful")
    a_round(running, world, t + 35)
    a_round(running, world, t + 40)
    assert Job.objects.count() == 2
    Job.objects.update(status="successful")
    for k in range(20):
        a_round(running, world, t + 45 + 5 * k)
    assert Job.objects.count() == 2
    row.refresh_from_db()
    assert row.state == "failed" and row.reason.startswith("auto-restart gave up after 2 restarts")

    world.dead.clear()
    assert a_round(running, world, t + 200)["p0"]["state"] == "healthy"
    row.refresh_from_db()
    assert row.restarts == 0


def test_a_busy_deployment_holds_the_restart_and_says_so_once(running, world):
    from apps.jobs.models import Job
    from apps.telemetry.health.machine import BUSY_PREFIX
    from apps.telemetry.models import HealthEvent, HealthPolicy

    HealthPolicy.objects.create(deployment=running, auto_restart=True, unhealthy_rounds=1, backoff_s=0)
    other = Job.objects.create(kind="deploy", status="running", target_type="deployments.deployment",
                               target_id=running.pk, target_label="reference")
    t = timezone.now().timestamp()
    a_round(running, world, t)
    world.dead.add(7101)
    for k in range(4):
        a_round(running, world, t + 5 + 5 * k)
    assert Job.objects.count() == 1
    busy = HealthEvent.objects.filter(subject="p0", reason__startswith=BUSY_PREFIX)
    assert busy.count() == 1 and f"job #{other.pk}" in busy.get().reason
    Job.objects.filter(pk=other.pk).update(status="successful")
    a_round(running, world, t + 30)
    assert Job.objects.filter(kind="restart").count() == 1


def test_a_deployment_whose_processes_all_stopped_ends_stopped(running, world):
    from apps.deployments.models import Process
    from apps.telemetry.services import scrape_running_deployments

    a_round(running, world, timezone.now().timestamp())
    Process.objects.filter(deployment=running).update(state="stopped")
    scrape_running_deployments(fetch=world.fetch)
    assert states(running) == {"p0": "stopped", "d0": "stopped", "proxy": "stopped"}


def test_beat_sends_one_round_per_deployment_to_the_telemetry_queue(running, world, monkeypatch, settings):
    """So several telemetry workers share the rounds: one task per deployment that runs something or still shows a
    state, each expiring before the next round is due; one that ran (a task) scrapes and stores that deployment."""
    from apps.deployments.models import Process
    from apps.telemetry import tasks
    from apps.telemetry.selectors import deployment_live
    from controlplane.celery import app

    sent = []
    monkeypatch.setattr(tasks.scrape_deployment_task, "apply_async", lambda args, **kw: sent.append((args, kw)))
    assert tasks.scrape_live_state_task() == 1
    assert sent == [((running.pk,), {"expires": tasks.ROUND_EXPIRES_S})]
    route = app.amqp.router.route({}, "apps.telemetry.tasks.scrape_deployment_task")
    assert route["queue"].name == settings.PDCP_QUEUES["telemetry"]

    from apps.telemetry import services

    monkeypatch.setitem(services.scrape_deployment.__kwdefaults__, "fetch", world.fetch)  # the task passes none
    tasks.scrape_deployment_task.run(running.pk)
    assert deployment_live(running.pk) is not None and states(running)["p0"] == "healthy"

    Process.objects.filter(deployment=running).update(state="stopped")
    sent.clear()
    assert tasks.scrape_live_state_task() == 1  # still shows healthy: one more round to end it stopped
    tasks.scrape_deployment_task.run(running.pk)
    assert states(running)["p0"] == "stopped"
    sent.clear()
    assert tasks.scrape_live_state_task() == 0 and sent == []


def test_a_broken_health_round_never_raises_into_the_scrape(running, world, monkeypatch, caplog):
    from apps.telemetry.health import record

    def broken(*a, **k):
        raise RuntimeError("database went away")

    monkeypatch.setattr(record, "policy_of", broken)
    health = a_round(running, world, timezone.now().timestamp())
    assert health == {} and "health round of deployment" in caplog.text


def test_the_live_payload_and_the_topology_snapshot_carry_the_health(running, world):
    from apps.telemetry.selectors import deployment_live
    from apps.telemetry.topology_snapshot import topology_snapshot

    world.dead.add(7102)
    a_round(running, world, timezone.now().timestamp())
    assert deployment_live(running.pk)["health"]["d0"]["state"] == "unhealthy"
    snap = topology_snapshot(running)
    insts = {i["name"]: i for i in snap["instances"]}
    assert insts["d0"]["health"]["state"] == "unhealthy" and insts["p0"]["health"]["state"] == "healthy"
    assert insts["p1"]["health"] is None  # no process of it: nothing judged
    assert {s["key"]: s["health"] and s["health"]["state"] for s in snap["services"]}["proxy"] == "healthy"


# --- API and page ------------------------------------------------------------------------------------------------

def test_viewers_read_the_policy_and_the_health_operators_change_it(running, world, api_client_for):
    from apps.telemetry.models import HealthPolicy

    a_round(running, world, timezone.now().timestamp())
    viewer, operator = api_client_for("viewer"), api_client_for("operator")
    url = f"/api/deployments/{running.pk}/health-policy/"
    got = viewer.get(url)
    assert got.status_code == 200 and got.json() == {"auto_restart": False, "unhealthy_rounds": 3, "backoff_s": 30,
                                                     "max_restarts": 3}
    assert viewer.put(url, {"auto_restart": True}, format="json").status_code == 403
    assert not HealthPolicy.objects.exists()
    put = operator.put(url, {"auto_restart": True, "backoff_s": 10}, format="json")
    assert put.status_code == 200 and put.json()["auto_restart"] is True and put.json()["backoff_s"] == 10
    policy = HealthPolicy.objects.get(deployment=running)
    assert policy.auto_restart and policy.backoff_s == 10 and policy.max_restarts == 3

    health = viewer.get(f"/api/deployments/{running.pk}/health/")
    assert health.status_code == 200
    body = health.json()
    assert body["policy"]["auto_restart"] is True
    assert {s["subject"]: s["state"] for s in body["states"]} == {"p0": "healthy", "d0": "healthy", "proxy": "healthy"}
    assert len(body["events"]) == 3 and body["events"][0]["to_state"] == "healthy"
    one = viewer.get(f"/api/deployments/{running.pk}/health/?subject=d0").json()
    assert [s["subject"] for s in one["states"]] == ["d0"] and {e["subject"] for e in one["events"]} == {"d0"}


@pytest.mark.parametrize(("body", "field"), [
    ({"unhealthy_rounds": 0}, "unhealthy_rounds"), ({"backoff_s": "soon"}, "backoff_s"),
    ({"max_restarts": 101}, "max_restarts"), ({"auto_restart": "yes"}, "auto_restart"), ({"colour": 1}, "colour")])
def test_bad_policy_values_name_their_field(running, api_client_for, body, field):
    answer = api_client_for("operator").put(f"/api/deployments/{running.pk}/health-policy/", body, format="json")
    assert answer.status_code == 400
    assert [e["field"] for e in answer.json()["errors"]] == [field]


def test_an_unknown_query_parameter_is_a_clear_400(running, api_client_for):
    answer = api_client_for("viewer").get(f"/api/deployments/{running.pk}/health/?subjekt=p0")
    assert answer.status_code == 400 and answer.json()["errors"][0]["field"] == "subjekt"


def test_the_health_section_colours_each_state_as_the_picture_does(running, world, client, make_user):
    world.dead.add(7102)
    a_round(running, world, timezone.now().timestamp())
    client.force_login(make_user("viewer", "vic"))
    html = client.get(f"/deployments/{running.pk}/health-policy/").content.decode()
    assert '<span class="badge red">Unhealthy</span>' in html and '<span class="badge green">Healthy</span>' in html


def test_the_policy_form_saves_for_operators_and_names_bad_fields(running, client, make_user):
    from apps.telemetry.models import HealthPolicy

    url = f"/deployments/{running.pk}/health-policy/"
    client.force_login(make_user("viewer", "eve"))
    page = client.get(url)
    assert page.status_code == 200 and b'id="health-policy-form"' in page.content and b"disabled" in page.content
    assert client.post(url, {"auto_restart": "on", "unhealthy_rounds": "2", "backoff_s": "5",
                             "max_restarts": "1"}).status_code == 403
    client.force_login(make_user("operator", "olga"))
    bad = client.post(url, {"unhealthy_rounds": "0", "backoff_s": "5", "max_restarts": "x"}, HTTP_HX_REQUEST="true")
    assert bad.status_code == 400
    assert b'data-field="unhealthy_rounds"' in bad.content and b'data-field="max_restarts"' in bad.content
    assert not HealthPolicy.objects.exists()
    ok = client.post(url, {"auto_restart": "on", "unhealthy_rounds": "2", "backoff_s": "5", "max_restarts": "1"},
                     HTTP_HX_REQUEST="true")
    assert ok.status_code == 200 and b"health policy saved" in ok.content
    policy = HealthPolicy.objects.get(deployment=running)
    assert (policy.auto_restart, policy.unhealthy_rounds, policy.backoff_s, policy.max_restarts) == (True, 2, 5, 1)
    plain = client.post(url, {"unhealthy_rounds": "3", "backoff_s": "5", "max_restarts": "1"})
    assert plain.status_code == 302 and plain.url.endswith(f"/deployments/{running.pk}/#health-policy")
    policy.refresh_from_db()
    assert policy.auto_restart is False  # an unticked box is off
