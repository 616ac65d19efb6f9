"""The refresh job ("Read state from nodes") against the simulated cluster over real SSH (127.0.10.30-.35): the
Process rows are made to lie the ways a lost worker leaves them (a process died unseen, a start never recorded, a
row with the wrong pid and state), and the refresh makes them say what the nodes run; an unreachable node turns its
rows unknown with the reason. A swept deploy queues a refresh by itself; operators start one by API or page."""

import os
import signal
import time

import pytest

from tests.deployments.simdeploy import cluster_fixture, import_inventory, topology_yaml
from tests.reliability.node_truth import rows_against_nodes, running_on_nodes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240), pytest.mark.usefixtures("no_celery")]
FIRST = 30


sim = cluster_fixture(FIRST)


@pytest.fixture
def inventory(sim, transactional_db):
    return import_inventory(sim)


def run_job_of(job):
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job

    run_job(job.pk)
    return Job.objects.get(pk=job.pk)


@pytest.mark.procs
def test_refresh_makes_the_rows_say_what_the_nodes_run(inventory, make_user, run_dir):
    from apps.deployments.models import Process
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_refresh,
        deployment_stop,
    )
    from apps.inventory.models import Node
    from tests.deployments.simdeploy import run_job_now

    operator = make_user("operator", "op")
    deployment = deployment_create(name="refreshed", cluster=inventory, user=operator, yaml_text=topology_yaml(run_dir))
    started = time.monotonic()
    deployed = run_job_now(deployment_deploy, deployment, operator)
    assert deployed.status == "successful", deployed.explanation
    rows = {r.key: r for r in Process.objects.filter(deployment=deployment)}
    assert not rows_against_nodes(deployment, run_dir)

    # The lies a lost worker leaves: a process died and nobody saw it; one started but its row never written; one
    # row with another pid, said stopped.
    died, unrecorded, wrong = "p0-dp0", "d0-dp0", "proxy"
    os.kill(rows[died].pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while died in running_on_nodes(run_dir):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    real_pid = rows[unrecorded].pid
    rows[unrecorded].delete()
    Process.objects.filter(pk=rows[wrong].pk).update(state="stopped", pid=1)
    assert len(rows_against_nodes(deployment, run_dir)) == 3

    refresh = run_job_of(deployment_refresh(deployment=deployment, user=operator))
    assert refresh.status == "successful", refresh.explanation
    assert not rows_against_nodes(deployment, run_dir), rows_against_nodes(deployment, run_dir)
    assert "3 rows changed" in refresh.explanation, refresh.explanation
    found = Process.objects.get(deployment=deployment, key=unrecorded)
    assert found.state == "running" and found.pid == real_pid and "no row" in found.state_detail
    assert Process.objects.get(deployment=deployment, key=died).state == "stopped"
    texts = "\n".join(refresh.events.values_list("text", flat=True))
    assert f"{died}: not running" in texts and f"{unrecorded}: running, pid {real_pid}, and no row" in texts

    # A node that cannot be asked: its rows become unknown, with why; the others are still read.
    proxy_node = Node.objects.get(cluster=inventory, name="proxy")
    Node.objects.filter(pk=proxy_node.pk).update(ssh_port=1)
    unreachable = run_job_of(deployment_refresh(deployment=deployment, user=operator))
    assert unreachable.status == "failed" and "proxy" in unreachable.explanation, unreachable.explanation
    row = Process.objects.get(deployment=deployment, key="proxy")
    assert row.state == "unknown" and "unreachable" in row.state_detail
    assert Process.objects.get(deployment=deployment, key=unrecorded).state == "running"
    Node.objects.filter(pk=proxy_node.pk).update(ssh_port=proxy_node.ssh_port)

    stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not running_on_nodes(run_dir)
    print(f"deploy, refresh x2, stop: {time.monotonic() - started:.1f}s")


def test_a_swept_deploy_queues_a_read_back_as_its_owner(deployment, settings):
    from datetime import timedelta

    from django.utils import timezone

    from apps.deployments.services import deployment_deploy
    from apps.jobs.models import Job
    from apps.jobs.services import job_transition, sweep_orphaned_jobs

    owner = deployment.created_by
    job = deployment_deploy(deployment=deployment, user=owner)
    job_transition(job, "running", worker="gone-host:4242")
    Job.objects.filter(pk=job.pk).update(heartbeat=timezone.now() - timedelta(
        seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 1))
    assert sweep_orphaned_jobs() == [job.pk]
    refresh = Job.objects.get(kind="refresh", target_id=deployment.pk)
    assert refresh.status == "pending" and refresh.created_by == owner
    assert refresh.params["revision"] == deployment.active_revision.pk


def test_a_swept_job_of_another_kind_queues_nothing(deployment, settings):
    from apps.deployments.services import deployment_preflight
    from apps.jobs.models import Job
    from apps.jobs.services import job_transition, sweep_orphaned_jobs

    job = deployment_preflight(deployment=deployment, user=deployment.created_by)
    job_transition(job, "running", worker="gone-host:4242")
    Job.objects.filter(pk=job.pk).update(heartbeat=None)
    assert sweep_orphaned_jobs() == [job.pk]
    assert not Job.objects.filter(kind="refresh").exists()


def test_operators_start_a_refresh_by_api_and_page(deployment, api_client_for, client, make_user):
    from apps.jobs.models import Job

    assert api_client_for("viewer").post(f"/api/deployments/{deployment.pk}/refresh/", {}, format="json"
                                         ).status_code == 403
    answer = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/refresh/", {}, format="json")
    assert answer.status_code == 202, answer.content
    job = Job.objects.get(pk=answer.json()["id"])
    assert job.kind == "refresh" and job.get_kind_display() == "Read state from nodes"
    busy = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/refresh/", {}, format="json")
    assert busy.status_code == 409
    Job.objects.filter(pk=job.pk).update(status="canceled")

    client.force_login(make_user("operator", "page-op"))
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert f'action="/deployments/{deployment.pk}/jobs/refresh/"' in page and "Read state from nodes" in page
    started = client.post(f"/deployments/{deployment.pk}/jobs/refresh/")
    second = Job.objects.filter(kind="refresh").exclude(pk=job.pk).get()
    assert started.status_code == 302 and started.url == f"/jobs/{second.pk}/"
