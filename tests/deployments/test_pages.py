"""Operator pages: list, editor with problems in place, plan, diff, job buttons by role, log viewer errors."""

import pytest
from django.test import Client

from apps.deployments.models import Deployment, Process
from apps.jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser_for(make_user):
    def login(role):
        client = Client()
        client.force_login(make_user(role, username=f"web-{role}"))
        return client

    return login


def test_nav_lists_deployments_and_the_list_shows_one(browser_for, deployment):
    page = browser_for("viewer").get("/deployments/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/deployments/"' in html and "reference" in html and "qwen3-235b" in html


def test_the_editor_shows_each_problem_in_place_and_saves_nothing(browser_for, ref_cluster, drawn_yaml):
    page = browser_for("operator").post("/deployments/new/", {
        "name": "ref", "cluster": ref_cluster.pk, "yaml_text": drawn_yaml})
    assert page.status_code == 400
    html = page.content.decode()
    assert "instance p0.dp" in html and "Fix:" in html
    line = drawn_yaml.splitlines().index("    dp: 2") + 1
    assert f'data-line="{line}"' in html
    assert not Deployment.objects.exists()


def test_creating_then_editing_makes_revisions(browser_for, ref_cluster, fixed_yaml):
    client = browser_for("operator")
    created = client.post("/deployments/new/", {"name": "ref", "cluster": ref_cluster.pk, "yaml_text": fixed_yaml})
    deployment = Deployment.objects.get()
    assert created.status_code == 302 and created["Location"] == f"/deployments/{deployment.pk}/"
    edited = client.post(f"/deployments/{deployment.pk}/edit/", {
        "yaml_text": fixed_yaml.replace("policy: least_conn", "policy: round_robin"), "comment": "rr"})
    assert edited.status_code == 302
    assert deployment.revisions.count() == 2 and deployment.active_revision.number == 1
    diff = client.get(f"/deployments/{deployment.pk}/diff/?old=1&new=2").content.decode()
    assert "proxy.policy" in diff and "round_robin" in diff


def test_the_new_deployment_template_gets_a_run_dir_of_its_own(browser_for, ref_cluster):
    from apps.deployments.views import NEW_TEMPLATE

    client = browser_for("operator")
    beside = NEW_TEMPLATE.replace("node: node0", "node: node1").replace("node: node2", "node: node3") \
        .replace("port: 1999", "port: 2999")  # the first one's dies and ports are taken
    for name, text in (("first", NEW_TEMPLATE), ("second", beside)):
        created = client.post("/deployments/new/", {"name": name, "cluster": ref_cluster.pk, "yaml_text": text})
        assert created.status_code == 302, created.content.decode()
        assert Deployment.objects.get(name=name).active_revision.spec["run_dir"] == f"/home/simnode/pdcp-runs/{name}"


def test_plan_page_shows_every_command_per_node(browser_for, deployment):
    html = browser_for("viewer").get(f"/deployments/{deployment.pk}/plan/").content.decode()
    assert html.count('class="plan-process"') == 12
    assert "Stage 2: engines" in html and "setsid nohup" in html
    assert "Deploy this plan" not in html  # viewers see the plan, not the button


def test_operator_buttons_lead_to_the_live_job_page(browser_for, deployment):
    client = browser_for("operator")
    detail = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Deploy r1" in detail and "Rolling restart" in detail
    response = client.post(f"/deployments/{deployment.pk}/jobs/deploy/", {"keep_on_failure": "on"})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.params["keep_on_failure"] is True


def test_viewer_cannot_press_deploy(browser_for, deployment):
    client = browser_for("viewer")
    assert "Deploy r1" not in client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert client.post(f"/deployments/{deployment.pk}/jobs/deploy/").status_code == 403
    assert not Job.objects.exists()


def test_log_of_an_unreachable_node_is_an_error_in_place(browser_for, deployment):
    from apps.inventory.models import Node

    node = Node.objects.get(cluster=deployment.cluster, name="node0")
    node.address = "127.0.10.239"  # nothing listens there
    node.save()
    process = Process.objects.create(deployment=deployment, node=node, node_name="node0", role="prefill",
                                     key="p0-dp0", address=node.address, command="x", fingerprint="x",
                                     log_path="/tmp/none.log", pid_file="/tmp/none.pid", state="running")
    page = browser_for("viewer").get(f"/deployments/processes/{process.pk}/log/")
    assert page.status_code == 200
    assert "unreachable" in page.content.decode()
