"""Deployments over the REST API: validation errors name instance and field, roles, plan, diff, activate, jobs."""

import pytest

from apps.deployments.models import Deployment, Process, Revision
from apps.jobs.models import Job
from tests.api_schema_check import field_errors
from tests.deployments.second_site import on_new_nodes

pytestmark = pytest.mark.django_db


def test_creating_the_drawn_reference_topology_is_a_400_naming_instance_and_field(api_client_for, ref_cluster,
                                                                                   drawn_yaml):
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "ref", "cluster": ref_cluster.pk, "yaml_text": drawn_yaml}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    p0 = [e for e in errors if e["instance"] == "p0"]
    assert p0 and p0[0]["field"] == "dp" and p0[0]["path"] == "instances[0].dp"
    assert "32 NPUs" in p0[0]["message"] and "DP=1" in p0[0]["suggestion"]
    assert not Deployment.objects.exists()


def test_yaml_syntax_and_shape_errors_are_400s_with_a_path(api_client_for, ref_cluster, fixed_yaml):
    client = api_client_for("operator")
    bad = client.post("/api/deployments/", {"name": "ref", "cluster": ref_cluster.pk,
                                            "yaml_text": "model: [unclosed"}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "yaml"
    shape = client.post("/api/deployments/", {"name": "ref", "cluster": ref_cluster.pk,
                                              "yaml_text": fixed_yaml.replace("tp: 4", "tp: four", 1)}, format="json")
    assert shape.status_code == 400
    error = shape.json()["errors"][0]
    assert error["instance"] == "d0" and error["field"] == "tp"


def test_unknown_node_names_the_instance(api_client_for, deployment, fixed_yaml):
    response = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/revisions/", {
        "yaml_text": fixed_yaml.replace("node: node3", "node: node9")}, format="json")
    assert response.status_code == 400
    error = next(e for e in response.json()["errors"] if e["field"] == "node")
    assert error["instance"] == "d1" and "node9" in error["message"] and "node0" in error["suggestion"]


def test_run_dir_shared_with_another_deployment_is_refused(api_client_for, deployment, fixed_yaml, ref_cluster):
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "second", "cluster": ref_cluster.pk, "yaml_text": fixed_yaml}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "run_dir"


def test_viewer_cannot_start_a_deploy(api_client_for, deployment):
    response = api_client_for("viewer").post(f"/api/deployments/{deployment.pk}/deploy/", {}, format="json")
    assert response.status_code == 403
    assert not Job.objects.exists()


def test_operator_starts_a_deploy_and_a_second_job_is_refused(api_client_for, deployment):
    client = api_client_for("operator")
    response = client.post(f"/api/deployments/{deployment.pk}/deploy/", {"max_parallel": 2}, format="json")
    assert response.status_code == 202
    job = Job.objects.get()
    assert job.kind == "deploy" and job.params["max_parallel"] == 2 and job.params["revision_number"] == 1
    assert client.post(f"/api/deployments/{deployment.pk}/stop/", {}, format="json").status_code == 409


def test_job_params_are_checked(api_client_for, deployment):
    client = api_client_for("operator")
    assert client.post(f"/api/deployments/{deployment.pk}/deploy/", {"max_parallel": 0},
                       format="json").status_code == 400
    response = client.post(f"/api/deployments/{deployment.pk}/restart/", {"instance": "nope"}, format="json")
    assert response.status_code == 400 and "p0" in field_errors(response)["instance"][0]
    response = client.post(f"/api/deployments/{deployment.pk}/rolling-restart/", {"role": "proxy"}, format="json")
    assert response.status_code == 400 and "role" in field_errors(response)
    assert not Job.objects.exists()


def test_plan_lists_every_command_per_stage_and_node(api_client_for, deployment):
    response = api_client_for("viewer").get(f"/api/deployments/{deployment.pk}/plan/")
    assert response.status_code == 200
    body = response.json()
    assert [s["name"] for s in body["stages"]] == ["kv_pool", "engines", "proxy"]
    engines = body["stages"][1]["nodes"]
    assert {n["node"] for n in engines} == {"node0", "node1", "node2", "node3"}
    d0 = next(n for n in engines if n["node"] == "node2")
    assert [p["key"] for p in d0["processes"]] == ["d0-dp0", "d0-dp1", "d0-dp2", "d0-dp3"]
    proxy = body["stages"][2]["nodes"][0]["processes"][0]
    assert "--admin-token-file" in proxy["command"] and deployment.proxy_admin_token not in proxy["command"]
    assert "setsid nohup" in body["text"]


def test_revisions_diff_activate_and_rollback(api_client_for, deployment, fixed_yaml):
    client = api_client_for("operator")
    r2 = client.post(f"/api/deployments/{deployment.pk}/revisions/", {
        "yaml_text": fixed_yaml.replace("max_num_seqs: 40", "max_num_seqs: 48"), "comment": "more seqs"},
        format="json")
    assert r2.status_code == 201 and r2.json()["number"] == 2 and not r2.json()["is_active"]
    diff = client.get(f"/api/deployments/{deployment.pk}/diff/?old=1&new=2").json()
    assert {c["path"] for c in diff["changes"]} == {"instances[d0].max_num_seqs", "instances[d1].max_num_seqs"}
    assert client.post(f"/api/deployments/{deployment.pk}/activate/", {"revision": 2},
                       format="json").status_code == 200
    assert Revision.objects.get(is_active=True).number == 2
    rollback = client.post(f"/api/deployments/{deployment.pk}/activate/", {"revision": 1, "deploy": True},
                           format="json")
    assert rollback.status_code == 202 and rollback.json()["kind"] == "deploy"
    assert Revision.objects.get(is_active=True).number == 1
    assert Revision.objects.filter(deployment=deployment).count() == 2


def test_exactly_one_active_revision_is_enforced_by_the_database(deployment):
    from django.db import IntegrityError, transaction

    r1 = deployment.active_revision
    with pytest.raises(IntegrityError), transaction.atomic():
        Revision.objects.create(deployment=deployment, number=2, spec=r1.spec, yaml_text="", is_active=True,
                                launch_profile="sim", served_model="x")


def test_export_returns_the_active_yaml(api_client_for, deployment, fixed_yaml):
    response = api_client_for("viewer").get(f"/api/deployments/{deployment.pk}/export/")
    assert response.status_code == 200 and response.content.decode() == fixed_yaml


def test_deployment_and_revision_changes_are_audited(deployment):
    from apps.audit.models import AuditEntry

    labels = set(AuditEntry.objects.values_list("object_type", flat=True))
    assert {"deployments.deployment", "deployments.revision"} <= labels


def _make(n, cluster, yaml_text):
    from apps.deployments.services import deployment_create

    start = Deployment.objects.count()
    for i in range(start, start + n):
        moved = on_new_nodes(cluster, yaml_text, i) if i else yaml_text  # one cluster, no dies or ports shared
        d = deployment_create(name=f"dep{i}", cluster=cluster, user=None,
                              yaml_text=moved.replace("/var/lib/pdcp/reference", f"/var/lib/pdcp/d{i}"))
        Process.objects.create(deployment=d, revision=d.active_revision, node_name="node0", role="prefill", key="p0",
                               address="127.0.10.230", command="x", fingerprint="x", log_path="/l", pid_file="/p",
                               state="running")


def test_list_queries_are_constant(api_client_for, ref_cluster, fixed_yaml, django_assert_num_queries):
    client = api_client_for("viewer")
    _make(3, ref_cluster, fixed_yaml)
    client.get("/api/deployments/")  # warm the role cache path
    with django_assert_num_queries(4) as first:
        assert client.get("/api/deployments/").json()["count"] == 3
    _make(3, ref_cluster, fixed_yaml)
    with django_assert_num_queries(len(first.captured_queries)):
        body = client.get("/api/deployments/").json()
    assert body["count"] == 6 and body["results"][0]["running_count"] == 1
    with django_assert_num_queries(len(first.captured_queries)) as procs:
        assert client.get("/api/processes/").json()["count"] == 6
    _make(6, ref_cluster, fixed_yaml)
    with django_assert_num_queries(len(procs.captured_queries)):
        assert client.get("/api/processes/").json()["count"] == 12


def test_run_dir_spelled_differently_is_still_the_same_directory(api_client_for, deployment, fixed_yaml, ref_cluster):
    respelled = fixed_yaml.replace("run_dir: /var/lib/pdcp/reference", "run_dir: /var/lib//pdcp/./reference/.")
    assert respelled != fixed_yaml
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "second", "cluster": ref_cluster.pk, "yaml_text": respelled}, format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["path"] == "run_dir" and "already uses run_dir /var/lib/pdcp/reference" in error["message"]


@pytest.mark.parametrize("mine", ["/var/lib/pdcp/reference/inner", "/var/lib/pdcp", "//var/lib/pdcp/reference//x"])
def test_run_dir_nested_with_another_deployments_is_refused(api_client_for, deployment, fixed_yaml, ref_cluster,
                                                            mine):
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "second", "cluster": ref_cluster.pk,
        "yaml_text": fixed_yaml.replace("run_dir: /var/lib/pdcp/reference", f"run_dir: {mine}")}, format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["path"] == "run_dir" and "on this cluster" in error["message"]
    assert "/var/lib/pdcp/reference" in error["message"] and deployment.name in error["message"]


def test_run_dir_beside_another_deployments_is_fine(api_client_for, deployment, fixed_yaml, ref_cluster):
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "second", "cluster": ref_cluster.pk,
        "yaml_text": on_new_nodes(ref_cluster, fixed_yaml).replace("run_dir: /var/lib/pdcp/reference",
                                                                   "run_dir: /var/lib/pdcp/reference-2")},
        format="json")
    assert response.status_code == 201, response.json()


def test_omitted_run_dir_is_named_after_the_deployment(api_client_for, ref_cluster, fixed_yaml):
    without = "\n".join(ln for ln in fixed_yaml.splitlines() if not ln.startswith("run_dir:"))
    client = api_client_for("operator")
    for name, text in (("first", without), ("second", on_new_nodes(ref_cluster, without))):
        response = client.post("/api/deployments/", {"name": name, "cluster": ref_cluster.pk, "yaml_text": text},
                               format="json")
        assert response.status_code == 201, response.json()
        assert Deployment.objects.get(name=name).active_revision.spec["run_dir"] == f"/var/lib/pdcp/{name}"


def test_an_env_that_runs_a_program_is_a_400_naming_instance_and_field(api_client_for, deployment, fixed_yaml):
    hostile = fixed_yaml.replace("    max_num_seqs: 40\n", "    max_num_seqs: 40\n    env: {BROWSER: 'sh -c id #%s', "
                                 "PYTHONWARNINGS: 'ignore::antigravity.x'}\n", 1)
    assert hostile != fixed_yaml
    response = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/revisions/", {
        "yaml_text": hostile}, format="json")
    assert response.status_code == 400
    errors = {(e["instance"], e["field"]) for e in response.json()["errors"]}
    assert errors == {("d0", "env.BROWSER"), ("d0", "env.PYTHONWARNINGS")}
    assert deployment.revisions.count() == 1


def test_a_rollback_that_cannot_deploy_activates_nothing(api_client_for, deployment, fixed_yaml):
    client = api_client_for("operator")
    client.post(f"/api/deployments/{deployment.pk}/revisions/", {
        "yaml_text": fixed_yaml.replace("max_num_seqs: 40", "max_num_seqs: 48"), "activate": True}, format="json")
    assert client.post(f"/api/deployments/{deployment.pk}/stop/", {}, format="json").status_code == 202
    rollback = client.post(f"/api/deployments/{deployment.pk}/activate/", {"revision": 1, "deploy": True},
                           format="json")
    assert rollback.status_code == 409 and "still pending" in rollback.json()["detail"]
    assert Revision.objects.get(deployment=deployment, is_active=True).number == 2
    assert Job.objects.count() == 1
