"""The instance page: what the active revision plans for one instance (role, nodes, dies, processes), its health and
health events, its log tail, the history charts it embeds, restart for operators only; 404 for an instance the
revision does not have, a message for a deployment without an active revision; and the deployment page's proxy and
pool charts."""

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.deployments.models import Process
from apps.jobs.models import Job
from apps.telemetry.models import HealthEvent, InstanceHealth, MetricPoint

pytestmark = pytest.mark.django_db


def _client(make_user, role):
    client = Client()
    client.force_login(make_user(role, username=f"{role}-page"))
    return client


def _url(deployment, name):
    return f"/deployments/{deployment.pk}/instances/{name}/"


def _charts(html: str) -> list[dict]:
    section = html[html.index('class="history-charts"'):]
    return json.loads(re.search(r'<script type="application/json">(.*?)</script>', section, re.S).group(1))


def _process(deployment, key, *, instance, state="running", pid=4242, node_name="node2"):
    return Process.objects.create(deployment=deployment, revision=deployment.active_revision, node=None,
                                  node_name=node_name, role="decode", instance=instance, key=key,
                                  address="127.0.10.232", command="x", fingerprint="x", log_path=f"/runs/{key}.log",
                                  pid_file="/p", state=state, pid=pid, started_at=timezone.now())


def test_a_viewer_sees_what_the_plan_says_of_an_instance(deployment, make_user):
    _process(deployment, "d0-dp1", instance="d0", pid=5101)
    response = _client(make_user, "viewer").get(_url(deployment, "d0"))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="instance-role">decode<' in html
    assert "TP4 × DP4" in html
    assert 'data-node="node2">node2: dies 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15<' in html
    rows = re.findall(r'<tr data-key="([^"]+)">', html[html.index('id="instance-processes"'):])
    assert rows == ["d0-dp0", "d0-dp1", "d0-dp2", "d0-dp3"]
    started = Process.objects.get(key="d0-dp1")
    assert f'href="/deployments/processes/{started.pk}/log/"' in html and ">5101<" in html
    assert html.count("not started") == 3  # the three ranks without a row
    assert 'id="restart-form"' not in html
    # the log tail of the first started process, or why it cannot be read, in place
    assert 'id="log-error">node node2 is no longer in the inventory<' in html
    assert "no health reading yet" in html


def test_the_page_embeds_the_instance_charts(deployment, make_user):
    html = _client(make_user, "viewer").get(_url(deployment, "p0")).content.decode()
    charts = _charts(html)
    assert {c["subject"] for c in charts} == {"inst:p0"}
    fields = [f["field"] for c in charts for f in c["fields"]]
    assert fields == ["kv_usage", "running", "waiting", "prompt_tok_s", "gen_tok_s", "ttft_p50_s", "ttft_p99_s",
                      "itl_p50_s", "itl_p99_s", "kv_in_bytes_s", "kv_out_bytes_s", "prefix_hit_rate",
                      "connector_hit_rate"]
    assert {c["id"]: c["unit"] for c in charts}["ttft"] == "seconds"
    assert f'data-url="/api/deployments/{deployment.pk}/history/"' in html
    assert re.findall(r'data-window-choice="([^"]+)"', html) == ["15m", "1h", "6h", "1d", "7d", "30d"]


def test_charts_without_any_history_say_so(deployment, make_user):
    client = _client(make_user, "viewer")
    html = client.get(_url(deployment, "p0")).content.decode()
    assert html.count("no history yet") == 7 and all(not c["has_history"] for c in _charts(html))

    MetricPoint.objects.create(deployment=deployment, tier="raw", at=timezone.now(), subject="inst:p0",
                               values={"kv_usage": 0.5})
    MetricPoint.objects.create(deployment=deployment, tier="raw", at=timezone.now(), subject="inst:p1",
                               values={"kv_usage": 0.5})
    html = client.get(_url(deployment, "p0")).content.decode()
    assert "no history yet" not in html and all(c["has_history"] for c in _charts(html))
    assert _client(make_user, "operator").get(_url(deployment, "d0")).content.decode().count("no history yet") == 7


def test_an_operator_restarts_the_instance_from_its_page(deployment, make_user):
    client = _client(make_user, "operator")
    html = client.get(_url(deployment, "d1")).content.decode()
    form = html[html.index('id="restart-form"'):]
    form = form[:form.index("</form>")]
    assert f'action="/deployments/{deployment.pk}/jobs/restart/"' in form
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))
    assert fields["instance"] == "d1" and fields["csrfmiddlewaretoken"]

    response = client.post(f"/deployments/{deployment.pk}/jobs/restart/", {"instance": fields["instance"]})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.kind == "restart" and job.params["instance"] == "d1"


def test_health_state_and_events_newest_first_capped_with_a_count(deployment, make_user):
    now = timezone.now()
    InstanceHealth.objects.create(deployment=deployment, subject="p1", state="unhealthy", reason="/health: 503",
                                  since=now - timedelta(minutes=3), restarts=2)
    HealthEvent.objects.bulk_create(
        HealthEvent(deployment=deployment, subject="p1", at=now - timedelta(seconds=5 * (60 - k)),
                    from_state="healthy" if k % 2 else "unhealthy", to_state="unhealthy" if k % 2 else "healthy",
                    reason=f"event {k}") for k in range(60))
    HealthEvent.objects.create(deployment=deployment, subject="p0", at=now, to_state="failed", reason="not mine")

    html = _client(make_user, "viewer").get(_url(deployment, "p1")).content.decode()
    assert 'class="badge red" id="instance-state" data-state="unhealthy">Unhealthy<' in html
    assert "/health: 503" in html and "2 auto-restarts" in html and "3\xa0minutes ago" in html
    events = html[html.index('id="health-events"'):]
    reasons = re.findall(r"<td>(event \d+|not mine)</td>", events)
    assert reasons == [f"event {k}" for k in range(59, 9, -1)]
    assert 'id="event-count">newest 50 of 60<' in html
    assert '<tr data-to="unhealthy">' in events and '<span class="badge green">Healthy</span>' in events


def test_the_page_reads_a_constant_number_of_queries(deployment, make_user):
    client = _client(make_user, "viewer")
    _process(deployment, "d0-dp0", instance="d0")

    def queries():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(_url(deployment, "d0")).status_code == 200
        return len(ctx.captured_queries)

    few = queries()
    for key in ("d0-dp1", "d0-dp2", "d0-dp3"):
        _process(deployment, key, instance="d0")
    HealthEvent.objects.bulk_create(HealthEvent(deployment=deployment, subject="d0", at=timezone.now(),
                                                to_state="healthy") for _ in range(30))
    assert queries() == few


def test_unknown_instance_and_deployment_are_404(deployment, make_user):
    client = _client(make_user, "viewer")
    assert client.get(_url(deployment, "p9")).status_code == 404
    assert client.get(f"/deployments/{deployment.pk + 100}/instances/p0/").status_code == 404


def test_a_deployment_without_an_active_revision_says_so(deployment, make_user):
    deployment.revisions.update(is_active=False)
    response = _client(make_user, "viewer").get(_url(deployment, "p0"))
    assert response.status_code == 200
    assert 'id="instance-problem">This deployment has no active revision' in response.content.decode()


def test_login_and_a_role_are_required(deployment, make_user):
    response = Client().get(_url(deployment, "p0"))
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    no_role = _client(make_user, None)
    assert no_role.get(_url(deployment, "p0")).status_code == 403
    assert no_role.get(f"/deployments/{deployment.pk}/service-charts/").status_code == 403


def test_the_deployment_page_loads_the_proxy_and_pool_charts(deployment, make_user):
    client = _client(make_user, "viewer")
    detail = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert f'hx-get="/deployments/{deployment.pk}/service-charts/"' in detail
    assert f'href="/deployments/{deployment.pk}/instances/' not in detail  # nothing started: no process rows
    _process(deployment, "d1-dp0", instance="d1")
    assert f'href="/deployments/{deployment.pk}/instances/d1/"' in client.get(
        f"/deployments/{deployment.pk}/").content.decode()

    MetricPoint.objects.create(deployment=deployment, tier="raw", at=timezone.now(), subject="proxy",
                               values={"req_s": 3.0})
    html = client.get(f"/deployments/{deployment.pk}/service-charts/").content.decode()
    assert "<h2>Proxy and pool</h2>" in html
    charts = {c["id"]: c for c in _charts(html)}
    assert {c["subject"] for c in charts.values()} == {"proxy", "pool", "kv-pool"}
    assert [f["field"] for f in charts["pool-memory"]["fields"]] == ["allocated_bytes", "total_bytes"]
    assert charts["proxy-requests"]["has_history"] and not charts["pool-hits"]["has_history"]


def test_an_invalid_revision_still_shows_the_instance_from_its_spec(deployment, make_user):
    from apps.inventory.models import Node

    Node.objects.filter(name="node2").update(npu_count=8)  # d0 wants 16 dies there
    _process(deployment, "d0-dp3", instance="d0", state="failed")
    html = _client(make_user, "viewer").get(_url(deployment, "d0")).content.decode()
    assert 'id="plan-problems"' in html
    rows = re.findall(r'<tr data-key="([^"]+)">', html[html.index('id="instance-processes"'):])
    assert rows == ["d0-dp3"] and 'class="badge red">Failed<' in html
