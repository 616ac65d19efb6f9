"""Starting jobs: stop works even when the inventory no longer fits the revision; a rollback whose deploy cannot
start activates nothing."""

import pytest

from apps.deployments.models import Deployment
from apps.jobs.choices import JobKind, JobStatus
from apps.jobs.models import Job

pytestmark = pytest.mark.django_db


def test_stop_starts_even_when_the_revision_no_longer_validates(api_client_for, deployment, monkeypatch):
    from apps.inventory.models import Node
    from apps.jobs import tasks

    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)
    Node.objects.filter(cluster=deployment.cluster, name="node0").update(npu_count=8)  # p0 needs 16
    client = api_client_for("operator")
    assert client.post(f"/api/deployments/{deployment.pk}/deploy/", {}, format="json").status_code == 400
    response = client.post(f"/api/deployments/{deployment.pk}/stop/", {}, format="json")
    assert response.status_code == 202, response.content
    assert Job.objects.get(pk=response.json()["id"]).kind == JobKind.STOP


def test_rollback_page_activates_nothing_when_the_deploy_cannot_start(client, make_user, deployment, fixed_yaml):
    from apps.deployments.services import revision_create

    operator = make_user("operator", username="rolling")
    second = revision_create(deployment=deployment, user=operator,
                             yaml_text=fixed_yaml.replace("max_num_seqs: 40", "max_num_seqs: 48"), activate=True)
    Job.objects.create(kind=JobKind.DEPLOY, status=JobStatus.RUNNING, target_type="deployments.deployment",
                       target_id=deployment.pk, target_label="busy")
    client.force_login(operator)
    response = client.post(f"/deployments/{deployment.pk}/revisions/1/activate/", {"deploy": "1"}, follow=True)
    assert response.status_code == 200
    assert "still running" in response.content.decode()
    assert Deployment.objects.get(pk=deployment.pk).active_revision.pk == second.pk
