"""Issue 17: the API's one error shape ({"detail", "errors": [{"field", "message", ...}]}) for every 4xx and the
500, documented once as the schema's Error component; nullable fields documented as such; a create or update
answering what GET answers; and the schema check of tests/api_schema_check.py naming what disagrees."""

import pytest
import yaml

from apps.accounts.api_errors import flatten_errors
from tests.api_schema_check import schema_mismatch

pytestmark = pytest.mark.django_db


def test_drf_nested_errors_flatten_to_the_paths_the_spec_problems_use():
    detail = {"name": ["required"], "non_field_errors": ["a or b"], "settings": {"concurrency": ["too big"]},
              "instances": [{}, {"tp": ["not a power of two"], "ports": {2: ["not a number"]}}]}
    assert flatten_errors(detail) == [
        {"field": "name", "message": "required"}, {"field": None, "message": "a or b"},
        {"field": "settings.concurrency", "message": "too big"},
        {"field": "instances[1].tp", "message": "not a power of two"},
        {"field": "instances[1].ports[2]", "message": "not a number"}]
    assert flatten_errors(["whole body wrong"]) == [{"field": None, "message": "whole body wrong"}]


def test_a_field_error_names_the_field_with_a_one_line_detail(api_client_for):
    response = api_client_for("admin").post("/api/clusters/", {"description": "x"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"detail": "name: This field is required.",
                               "errors": [{"field": "name", "message": "This field is required."}]}


def test_malformed_json_is_a_400_about_no_field(api_client_for):
    response = api_client_for("admin").post("/api/clusters/", "{not json", content_type="application/json")
    body = response.json()
    assert response.status_code == 400 and body["detail"].startswith("JSON parse error")
    assert body["errors"] == [{"field": None, "message": body["detail"]}]


def test_the_other_statuses_have_a_detail_and_no_errors_and_keep_their_headers(api_client_for, cluster):
    from rest_framework.test import APIClient

    anonymous = APIClient().get("/api/clusters/")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Token")
    assert set(anonymous.json()) == {"detail", "errors"} and anonymous.json()["errors"] == []
    viewer = api_client_for("viewer")
    refused = viewer.delete(f"/api/clusters/{cluster.pk}/")
    missing = viewer.get("/api/clusters/999999/")
    wrong_method = api_client_for("admin").put("/api/jobs/1/", {}, format="json")
    assert (refused.status_code, missing.status_code, wrong_method.status_code) == (403, 404, 405)
    assert "GET" in wrong_method["Allow"]
    for response in (refused, missing, wrong_method):
        assert response.json()["errors"] == [] and response.json()["detail"]


def test_a_lockout_429_keeps_retry_after(make_user, settings):
    from rest_framework.test import APIClient

    settings.LOGIN_MAX_FAILURES = 1
    make_user("viewer", "alice")
    client = APIClient()
    answers = [client.post("/api/auth/token/", {"username": "alice", "password": "wrong"}, format="json",
                           REMOTE_ADDR="10.9.9.9") for _ in range(2)]
    locked = answers[-1]
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert locked.json()["errors"] == [] and "Too many failed attempts" in locked.json()["detail"]


def test_spec_problems_keep_their_keys_inside_the_shape(api_client_for, cluster):
    response = api_client_for("operator").post("/api/deployments/", {"name": "broken", "cluster": cluster.pk,
                                                                     "yaml_text": "instances: [\n"}, format="json")
    body = response.json()
    assert response.status_code == 400 and body["detail"].startswith("the spec does not validate: yaml: ")
    assert "\n" not in body["detail"]
    assert body["errors"][0]["path"] == body["errors"][0]["field"] == "yaml"
    assert all(set(e) == {"path", "instance", "field", "message", "suggestion"} for e in body["errors"])


def test_a_rejected_inventory_file_names_line_and_field(api_client_for):
    response = api_client_for("admin").post("/api/inventory/import/", {"text": "clusters: 3\n"}, format="json")
    body = response.json()
    assert response.status_code == 400 and body["detail"].startswith("the inventory file is rejected")
    assert {"field", "message", "line"} <= set(body["errors"][0])


def test_an_unexpected_error_is_a_500_in_the_shape(api_client_for, monkeypatch):
    from apps.inventory.api import views

    def broken(text):
        raise RuntimeError("boom")

    monkeypatch.setattr(views, "inventory_import", broken)
    response = api_client_for("admin").post("/api/inventory/import/", {"text": "clusters: []\n"}, format="json")
    assert response.status_code == 500
    body = response.json()
    assert body["errors"] == [] and body["detail"].startswith("internal error (reference ")
    assert "boom" not in body["detail"]


def test_the_schema_documents_the_error_shape_and_the_nullable_fields(api_client_for):
    schema = yaml.safe_load(api_client_for("viewer").get("/api/schema/").content)
    components = schema["components"]["schemas"]
    assert components["Error"]["required"] == ["detail", "errors"]
    assert components["ErrorItem"]["properties"]["field"]["nullable"] is True
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for code in ("400", "500"):
                error = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
                assert error.rsplit("/", 1)[1] in {"Error", "Problems", "InventoryFileErrors"}, (method, path)
    assert components["Revision"]["properties"]["created_by"]["nullable"] is True
    assert components["Job"]["properties"]["duration_seconds"]["nullable"] is True
    assert "description" in components["RevisionCreateRequest"]["properties"]["activate"]
    cluster_delete = schema["paths"]["/api/clusters/{id}/"]["delete"]["responses"]
    assert {"401", "403", "404", "409"} <= set(cluster_delete)


def test_create_and_update_answer_what_get_answers(api_client_for, cluster, node):
    admin = api_client_for("admin")
    created = admin.post("/api/clusters/", {"name": "second"}, format="json")
    assert created.status_code == 201 and created.json()["node_count"] == 0
    assert created.json() == admin.get(f"/api/clusters/{created.json()['id']}/").json()
    new_node = admin.post("/api/nodes/", {"cluster": cluster.pk, "name": "n2", "address": "127.0.10.172"},
                          format="json")
    assert new_node.status_code == 201 and new_node.json()["npu_total"] == 0
    assert new_node.json() == admin.get(f"/api/nodes/{new_node.json()['id']}/").json()
    patched = admin.patch(f"/api/nodes/{node.pk}/", {"credential": None}, format="json")
    assert patched.status_code == 200 and patched.json()["credential_name"] is None
    assert patched.json() == admin.get(f"/api/nodes/{node.pk}/").json()
    key = admin.post("/api/credentials/", {"name": "pw", "username": "u", "kind": "password", "secret": "hunter22"},
                     format="json")
    assert key.status_code == 201 and key.json() == admin.get(f"/api/credentials/{key.json()['id']}/").json()
    renamed = admin.patch(f"/api/credentials/{key.json()['id']}/", {"username": "v"}, format="json")
    assert renamed.json() == admin.get(f"/api/credentials/{key.json()['id']}/").json()

    from apps.deployments.models import Deployment

    empty = Deployment.objects.create(name="empty", cluster=cluster)
    described = admin.patch(f"/api/deployments/{empty.pk}/", {"description": "later"}, format="json")
    assert described.status_code == 200 and described.json()["description"] == "later"
    assert described.json() == admin.get(f"/api/deployments/{empty.pk}/").json()


class _Answer:
    def __init__(self, status_code, body, content_type="application/json"):
        import json

        self.status_code, self.content, self.streaming = status_code, json.dumps(body).encode(), False
        self.headers = {"Content-Type": content_type}

    def get(self, name, default=None):
        return self.headers.get(name, default)


def test_the_schema_check_names_method_path_status_and_pointer():
    undocumented = schema_mismatch("GET", "/api/clusters/", _Answer(418, {}))
    assert undocumented.startswith("GET /api/clusters/ -> 418: status 418 is not documented")
    wrong = schema_mismatch("GET", "/api/clusters/7/", _Answer(200, {"id": "seven", "name": "c"}))
    assert wrong.startswith("GET /api/clusters/7/ -> 200: the body does not match the schema")
    assert "at /id " in wrong and "at / " in wrong  # the bad value's pointer, and the missing keys at the root
    old_layout = schema_mismatch("POST", "/api/clusters/", _Answer(400, {"name": ["This field is required."]}))
    assert "'errors' is a required property" in old_layout
    assert schema_mismatch("GET", "/api/clusters/7/", _Answer(404, {"detail": "Not found.", "errors": []})) is None
