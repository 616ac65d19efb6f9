"""Job parameters are read once (apps/deployments/job_params.py): the API, the page's job buttons and the services
give a bad value the same field-named error, and each number has one limit."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.deployments.api.serializers import JobParamsSerializer
from apps.deployments.job_params import LIMITS, BadJobParams, JobParams
from apps.deployments.services import deployment_deploy, deployment_restart, deployment_rolling_restart
from apps.jobs.choices import JobKind
from apps.jobs.models import Job

BAD = [
    ({"max_parallel": 0}, {"max_parallel": "expected a whole number from 1 to 256"}),
    ({"max_parallel": 257}, {"max_parallel": "expected a whole number from 1 to 256"}),
    ({"stop_grace": 601}, {"stop_grace": "expected a whole number from 1 to 600"}),
    ({"health_timeout": 3601}, {"health_timeout": "expected a whole number from 1 to 3600"}),
    ({"health_timeout": "soon"}, {"health_timeout": "expected a whole number from 1 to 3600"}),
    ({"stop_grace": True}, {"stop_grace": "expected a whole number from 1 to 600"}),
    ({"keep_on_failure": "maybe"}, {"keep_on_failure": "expected true or false"}),
    ({"max_parallel": 0, "stop_grace": -1}, {"max_parallel": "expected a whole number from 1 to 256",
                                             "stop_grace": "expected a whole number from 1 to 600"}),
    ({"retries": 3}, {"retries": "unknown parameter; known: max_parallel, health_timeout, stop_grace, "
                                 "keep_on_failure, sequential"}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("params, errors", BAD)
def test_a_bad_value_gets_the_same_error_from_the_api_and_the_service(api_client_for, deployment, params, errors):
    response = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/deploy/", params, format="json")
    assert response.status_code == 400
    assert {e["field"]: e["message"] for e in response.json()["errors"]} == errors
    with pytest.raises(BadJobParams) as caught:
        deployment_deploy(deployment=deployment, user=None, params=params)
    assert caught.value.errors == errors
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_page_shows_the_same_error(make_user, deployment):
    client = Client()
    client.force_login(make_user("operator", username="web-operator"))
    page = client.post(f"/deployments/{deployment.pk}/jobs/deploy/", {"keep_on_failure": "maybe"}, follow=True)
    assert "keep_on_failure: expected true or false" in page.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("via", ["api", "service"])
def test_each_limit_is_the_one_limit_whichever_way_in(api_client_for, deployment, via):
    highest = {name: high for name, (_low, high) in LIMITS.items()}
    if via == "api":
        response = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/deploy/", highest,
                                                   format="json")
        assert response.status_code == 202, response.json()
    else:
        deployment_deploy(deployment=deployment, user=None, params=highest)
    assert {k: Job.objects.get().params[k] for k in LIMITS} == highest


def test_the_api_schema_documents_the_same_limits():
    for name, (low, high) in LIMITS.items():
        field = JobParamsSerializer().fields[name]
        assert (field.min_value, field.max_value) == (low, high)


def test_sequential_means_one_node_at_a_time_and_form_spellings_read():
    params = JobParams.from_dict({"sequential": "on", "max_parallel": "16", "keep_on_failure": "true"})
    assert params == JobParams(max_parallel=1, keep_on_failure=True)
    assert params.as_dict() == {"max_parallel": 1, "health_timeout": 120, "stop_grace": 10,
                                "keep_on_failure": True}


def test_what_a_job_stored_reads_back():
    stored = {**JobParams(stop_grace=3, role="decode").as_dict(), "revision": 7, "revision_number": 2}
    assert JobParams.stored(stored) == JobParams(stop_grace=3, role="decode")


def test_restart_needs_an_instance_and_rolling_restart_a_role():
    with pytest.raises(BadJobParams) as caught:
        JobParams.from_dict({}, kind=JobKind.RESTART)
    assert list(caught.value.errors) == ["instance"]
    with pytest.raises(BadJobParams) as caught:
        JobParams.from_dict({"role": "proxy"}, kind=JobKind.ROLLING_RESTART)
    assert caught.value.errors == {"role": "expected prefill or decode"}
    with pytest.raises(BadJobParams) as caught:
        JobParams.from_dict({"role": "decode"})  # a deploy has no role
    assert list(caught.value.errors) == ["role"]


@pytest.mark.django_db
def test_restart_errors_match_between_api_and_service(api_client_for, deployment):
    client = api_client_for("operator")
    response = client.post(f"/api/deployments/{deployment.pk}/rolling-restart/", {"role": "proxy"}, format="json")
    assert response.json()["errors"] == [{"field": "role", "message": "expected prefill or decode"}]
    with pytest.raises(BadJobParams) as caught:
        deployment_rolling_restart(deployment=deployment, user=None, role="proxy")
    assert caught.value.errors == {"role": "expected prefill or decode"}
    response = client.post(f"/api/deployments/{deployment.pk}/restart/", {"instance": "p0", "stop_grace": 900},
                           format="json")
    assert response.json()["errors"] == [{"field": "stop_grace", "message": "expected a whole number from 1 to 600"}]
    with pytest.raises(BadJobParams) as caught:
        deployment_restart(deployment=deployment, user=None, instance="p0", params={"stop_grace": 900})
    assert caught.value.errors == {"stop_grace": "expected a whole number from 1 to 600"}
