"""What a script needs from the API's query parameters and job-starting actions: unknown parameters and bad
limit/offset are 400s naming them, filters take names as well as ids, names match in any case, choice filters
document their enums, every action that starts a job answers 202 with Location, deploy names the revision it
deploys, and a diff defaults to the newest revision against the active one."""

# ruff: noqa: F811  (the fixtures imported below are parameters of the tests)
import pytest
import yaml

from tests.deployments.conftest import deployment, fixed_yaml, ref_cluster  # noqa: F401  (fixtures)


@pytest.fixture
def viewer(api_client_for):
    return api_client_for("viewer")


@pytest.fixture
def operator(api_client_for):
    return api_client_for("operator")


@pytest.mark.parametrize("path", ["/api/nodes/?clustr=1", "/api/jobs/?stauts=pending", "/api/deployments/?bogus=1",
                                  "/api/audit/?x=1", "/api/users/?who=me"])
def test_an_unknown_query_parameter_is_a_400_naming_it(api_client_for, path):
    name = path.split("?")[1].split("=")[0]
    response = api_client_for("admin").get(path)
    assert response.status_code == 400, response.content
    assert name in response.content.decode()


def test_unknown_parameters_on_one_object_and_on_actions_are_refused_too(viewer, deployment):
    assert viewer.get(f"/api/deployments/{deployment.pk}/?verbose=1").status_code == 400
    assert viewer.get(f"/api/deployments/{deployment.pk}/plan/?revison=1").status_code == 400
    assert viewer.get(f"/api/deployments/{deployment.pk}/plan/?revision=1").status_code == 200
    assert viewer.get(f"/api/deployments/{deployment.pk}/?format=json").status_code == 200


@pytest.mark.parametrize(("query", "name"), [("limit=abc", "limit"), ("limit=0", "limit"), ("offset=-1", "offset"),
                                             ("offset=x", "offset"), ("limit=-5", "limit")])
def test_a_bad_limit_or_offset_is_a_400_naming_it(viewer, ref_cluster, query, name):
    response = viewer.get(f"/api/nodes/?{query}")
    assert response.status_code == 400 and name in response.content.decode()


def test_a_big_limit_is_capped_not_refused(viewer, ref_cluster):
    response = viewer.get("/api/nodes/?limit=100000&offset=2")
    assert response.status_code == 200 and len(response.json()["results"]) == 4


def test_cluster_and_deployment_filters_take_a_name_or_an_id(viewer, deployment, ref_cluster):
    for value in (ref_cluster.pk, "reference", "REFERENCE"):
        assert viewer.get("/api/deployments/", {"cluster": value}).json()["count"] == 1, value
        assert viewer.get("/api/nodes/", {"cluster": value}).json()["count"] == 6, value
        assert viewer.get("/api/npus/", {"cluster": value}).status_code == 200
    for value in (deployment.pk, "reference", "Reference"):
        assert viewer.get("/api/revisions/", {"deployment": value}).json()["count"] == 1, value
        assert viewer.get("/api/processes/", {"deployment": value}).status_code == 200
    assert viewer.get("/api/deployments/", {"cluster": "elsewhere"}).json()["count"] == 0
    assert viewer.get("/api/nodes/", {"cluster": "elsewhere"}).json()["count"] == 0


def test_names_match_in_any_case_and_search_finds_part_of_one(viewer, deployment, ref_cluster):
    assert [n["name"] for n in viewer.get("/api/nodes/", {"name": "NODE0"}).json()["results"]] == ["node0"]
    assert viewer.get("/api/deployments/", {"name": "Reference"}).json()["count"] == 1
    assert viewer.get("/api/nodes/", {"search": "NODE"}).json()["count"] == 4
    assert viewer.get("/api/deployments/", {"search": "REFER"}).json()["count"] == 1
    assert viewer.get("/api/clusters/", {"name": "Reference"}).json()["count"] == 1


def test_choice_filters_document_their_enums(viewer, admin_user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(admin_user)
    schema = yaml.safe_load(client.get("/api/schema/").content)

    def enum(path, name):
        param = next(p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name)
        return set(param["schema"]["enum"])

    assert {"pending", "running", "successful"} <= enum("/api/jobs/", "status")
    assert {"reachable", "unreachable"} <= enum("/api/nodes/", "reachability")
    assert {"OK", "Critical"} <= enum("/api/npus/", "health")
    assert "wait" in {p["name"] for p in schema["paths"]["/api/jobs/{id}/"]["get"]["parameters"]}
    assert {"waiting", "links"} <= set(schema["components"]["schemas"]["Job"]["properties"])
    assert "/api/workers/" in schema["paths"]


def test_export_refuses_an_unknown_format_naming_the_allowed_ones(viewer, ref_cluster):
    response = viewer.get("/api/inventory/export/?as=AAA")
    assert response.status_code == 400
    assert "yaml" in response.content.decode() and "csv" in response.content.decode()
    assert viewer.get("/api/inventory/export/?as=csv").status_code == 200
    assert viewer.get("/api/inventory/export/").status_code == 200
    assert viewer.get("/api/inventory/export/?ass=csv").status_code == 400


@pytest.mark.parametrize(("action", "body"), [("preflight", {}), ("deploy", {}), ("stop", {}),
                                              ("restart", {"instance": "p0"}), ("rolling-restart", {"role": "decode"})])
def test_every_deployment_job_action_answers_202_with_the_jobs_location(operator, deployment, action, body):
    response = operator.post(f"/api/deployments/{deployment.pk}/{action}/", body, format="json")
    assert response.status_code == 202, response.content
    job = response.json()
    assert response["Location"] == f"/api/jobs/{job['id']}/" == job["links"]["job"]
    assert job["links"]["events"] == f"/api/jobs/{job['id']}/events/"


def test_discover_and_rollback_answer_202_with_location(operator, deployment, ref_cluster, fixed_yaml):
    node = ref_cluster.nodes.first()
    response = operator.post(f"/api/nodes/{node.pk}/discover/")
    assert response.status_code == 202 and response["Location"] == f"/api/jobs/{response.json()['id']}/"
    operator.post(f"/api/deployments/{deployment.pk}/revisions/", {"yaml_text": fixed_yaml, "comment": "again"},
                  format="json")
    rollback = operator.post(f"/api/deployments/{deployment.pk}/activate/", {"revision": 2, "deploy": True},
                             format="json")
    assert rollback.status_code == 202 and rollback["Location"] == f"/api/jobs/{rollback.json()['id']}/"


def test_deploy_names_the_revision_it_deploys_and_refuses_another(operator, deployment, fixed_yaml):
    operator.post(f"/api/deployments/{deployment.pk}/revisions/", {"yaml_text": fixed_yaml, "comment": "r2"},
                  format="json")
    refused = operator.post(f"/api/deployments/{deployment.pk}/deploy/", {"revision": 2}, format="json")
    assert refused.status_code == 400
    assert "revision" in refused.content.decode() and "r1" in refused.content.decode()
    assert "activate" in refused.content.decode()
    started = operator.post(f"/api/deployments/{deployment.pk}/deploy/", {"revision": 1}, format="json")
    assert started.status_code == 202, started.content
    assert started.json()["target_label"].endswith(" r1") and started.json()["params"]["revision_number"] == 1


def test_diff_defaults_to_the_newest_revision_against_the_active_one(viewer, operator, deployment, fixed_yaml):
    data = yaml.safe_load(fixed_yaml)
    data["proxy"]["port"] = data["proxy"].get("port", 1999) + 100
    operator.post(f"/api/deployments/{deployment.pk}/revisions/", {"spec": data, "comment": "port"}, format="json")
    body = viewer.get(f"/api/deployments/{deployment.pk}/diff/").json()
    assert body["old"] == 1 and body["new"] == 2
    assert any(change["path"].startswith("proxy") for change in body["changes"])
    assert viewer.get(f"/api/deployments/{deployment.pk}/diff/?new=1").json()["changes"] == []
    assert viewer.get(f"/api/deployments/{deployment.pk}/diff/?old=x").status_code == 400
