"""The home page's overview (issue 12 item 3): every deployment with its instances healthy of total (the health
policy's states, else its processes'), req/s and KV flow from the live state, its staleness, the job running on it and
its last evaluation; a partial the page polls; an empty state; the same number of queries for 1 or 6 deployments."""

from __future__ import annotations

import copy
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.deployments.models import Deployment, Process, Revision
from apps.evals.models import EvalRun
from apps.jobs.models import Job
from apps.telemetry.models import InstanceHealth
from apps.telemetry.overview import deployments_overview
from apps.telemetry.selectors import live_key

pytestmark = pytest.mark.django_db


def _client(make_user, role="viewer"):
    client = Client()
    user = make_user(role, f"{role}-overview")
    client.force_login(user)
    return client


def _health(deployment, **states):
    for subject, state in states.items():
        InstanceHealth.objects.create(deployment=deployment, subject=subject, state=state, since=timezone.now())


def _process(deployment, key, instance, state, role="prefill"):
    return Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="node0",
                                  role=role, instance=instance, key=key, address="127.0.10.230", command="x",
                                  fingerprint="x", log_path="/l", pid_file="/p", state=state)


def _live(deployment, *, at, req_s, kv=(), proxy_key="proxy"):
    edges = {f"kv_transfer:inst:p{i}->inst:d0": {"kv_bytes_s": v} for i, v in enumerate(kv)}
    edges["request:proc:proxy->inst:p0"] = {"req_s": 99.0}  # not KV: left out of the flow
    cache.set(live_key(deployment.pk), {
        "at": at, "targets": [{"key": proxy_key, "role": "proxy"}, {"key": "kv-pool", "role": "kv_pool"}],
        "services": {proxy_key: {"status": "ok", "req_s": req_s}, "kv-pool": {"status": "ok"}}, "edges": edges,
        "instances": {}}, timeout=60)


def _run(deployment, *, finished, **fields):
    revision = deployment.active_revision
    values = {"deployment": deployment, "deployment_name": deployment.name, "revision": revision,
              "revision_number": revision.number, "revision_spec": copy.deepcopy(revision.spec),
              "endpoint_url": "http://127.0.10.234:1999/", "served_model": "qwen3-235b", "mode": "accuracy",
              "dataset_key": "catalogue:aime2025", "dataset_abbr": "aime2025", "dataset_family": "aime",
              "status": "succeeded", "finished": finished}
    values.update(fields)
    return EvalRun.objects.create(**values)


def _more_deployments(like, n):
    """Copies of a deployment's active revision, stored as they are (their ports would collide on a real cluster)."""
    rev = like.active_revision
    out = []
    for i in range(n):
        d = Deployment.objects.create(name=f"extra-{i}", cluster=like.cluster)
        Revision.objects.create(deployment=d, number=1, spec=rev.spec, yaml_text=rev.yaml_text, is_active=True,
                                launch_profile=rev.launch_profile, served_model=rev.served_model)
        out.append(d)
    return out


def test_a_new_install_says_there_is_no_deployment_yet(make_user):
    html = _client(make_user, "operator").get("/").content.decode()
    assert 'id="overview"' in html and "No deployments yet." in html and 'href="/deployments/new/"' in html
    viewer_html = _client(make_user, "viewer").get("/overview/").content.decode()
    assert "No deployments yet." in viewer_html and "/deployments/new/" not in viewer_html


def test_health_states_live_figures_job_and_the_latest_evaluation(deployment, make_user):
    _health(deployment, p0="healthy", p1="healthy", d0="degraded", d1="unhealthy", proxy="healthy")
    _live(deployment, at=time.time() - 3, req_s=12.5, kv=(2.0e9, 1.5e9))
    job = Job.objects.create(kind="deploy", status="running", target_type="deployments.deployment",
                             target_id=deployment.pk, target_label=deployment.name)
    now = timezone.now()
    _run(deployment, finished=now - timedelta(hours=2), accuracy=40.0)
    _run(deployment, finished=now - timedelta(hours=1), accuracy=73.3)
    _run(deployment, finished=now - timedelta(minutes=5), status="failed", accuracy=None)  # not a score

    [row] = deployments_overview()
    assert (row.instances_good, row.instances_total, row.source) == (2, 4, "health")  # the proxy is no instance
    assert {s.state: (s.count, s.colour) for s in row.states} == {
        "healthy": (2, "green"), "degraded": (1, "amber"), "unhealthy": (1, "red")}
    assert (row.req_s, row.kv_bytes_s, row.live_stale, row.job) == (12.5, 3.5e9, False, job)
    assert 2.5 <= row.live_age_s <= 10

    html = _client(make_user).get("/").content.decode()
    assert f'href="/deployments/{deployment.pk}/"' in html and ">reference</a>" in html
    assert 'data-good="2" data-total="4"' in html and "2/4</span>\n        healthy" in html
    assert "12.5 req/s" in html and "3.5 GB/s" in html and f'href="/jobs/{job.pk}/"' in html
    assert "<strong>73.3%</strong>" in html and "40.0%" not in html


def test_a_performance_run_shows_its_throughput_and_ttft(deployment, make_user):
    _run(deployment, finished=timezone.now(), mode="performance", accuracy=None,
         perf_summary={"output_token_throughput": 1834.2}, perf_percentiles={"TTFT": {"avg": 412.0}})
    html = _client(make_user).get("/overview/").content.decode()
    assert "1.8 ktok/s" in html and "TTFT 412 ms" in html and "<strong>" not in html


def test_without_health_rows_the_processes_say_how_many_instances_run(deployment):
    _process(deployment, "p0", "p0", "running")
    _process(deployment, "p1", "p1", "failed")
    for r in range(4):
        _process(deployment, f"d0-dp{r}", "d0", "running" if r else "unknown", role="decode")
    _process(deployment, "kv-pool", "", "running", role="kv_pool")  # a service, not an instance

    [row] = deployments_overview()
    assert (row.instances_good, row.instances_total, row.source) == (1, 4, "processes")
    assert {s.state: s.count for s in row.states} == {"failed": 1, "unknown": 1, "running": 1}
    assert row.req_s is None and row.live_age_s is None and row.evaluation is None


def test_an_old_live_state_is_marked_stale_and_a_new_deployment_as_not_deployed(deployment, make_user):
    _live(deployment, at=time.time() - 40, req_s=None)
    [row] = deployments_overview()
    assert row.live_stale and row.req_s is None and row.kv_bytes_s is None and row.source == ""
    html = _client(make_user).get("/overview/").content.decode()
    assert "(stale)" in html and "not deployed" in html and "none yet" in html


def test_the_overview_needs_a_login(deployment):
    for url in ("/", "/overview/"):
        response = Client().get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def _count_queries(client, url="/overview/") -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_the_number_of_queries_does_not_grow_with_the_deployments(deployment, make_user):
    client = _client(make_user)
    _health(deployment, p0="healthy")
    _run(deployment, finished=timezone.now(), accuracy=50.0)
    one = _count_queries(client)
    dashboard_one = _count_queries(client, "/")
    for d in _more_deployments(deployment, 5):
        _health(d, p0="healthy", d0="starting")
        _process(d, "p1", "p1", "running")
        _live(d, at=time.time(), req_s=1.0, kv=(1.0,))
        _run(d, finished=timezone.now(), accuracy=60.0)
        _run(d, finished=timezone.now() - timedelta(days=1), accuracy=10.0)
        Job.objects.create(kind="stop", status="pending", target_type="deployments.deployment", target_id=d.pk,
                           target_label=d.name)
    assert _count_queries(client) == one <= 12, one
    assert _count_queries(client, "/") == dashboard_one
    assert len(deployments_overview()) == 6
