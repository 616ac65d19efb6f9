"""What the schema fuzzing of test_api_fuzz.py found, each pinned by one plain request: a NUL character in a
query parameter was a 500 (PostgreSQL refuses it), a URL below /api/ that no route takes answered Django's
HTML 404, the YAML exports were documented as a JSON string while their body is a YAML mapping, and a username
outside the documented pattern (`^[\\w.@+-]+$`, ASCII to every schema validator) was stored and answered."""

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.api_schema_check import openapi, to_json_schema

REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))


@pytest.mark.parametrize("query", [{"cluster": "ref\x00erence"}, {"deployment": "\x00"}])
def test_a_nul_character_in_a_query_parameter_is_a_400_not_a_500(api_client_for, query):
    response = api_client_for("viewer").get("/api/prometheus/sd/", query)

    assert response.status_code == 400
    assert response.json()["errors"][0]["message"].startswith("a value the database cannot store")


@pytest.mark.parametrize("path", ["/api/deployments/null/health-policy/", "/api/deployments/1.5/history/",
                                  "/api/no-such-collection/"])
def test_an_api_url_no_route_takes_is_a_json_404_in_the_error_shape(api_client_for, path):
    response = api_client_for("viewer").get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found.", "errors": []}


def test_a_page_url_no_route_takes_keeps_the_html_404(client):
    response = client.get("/no-such-page/")

    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def documented_yaml_schema(path_template: str) -> dict:
    content = openapi()["paths"][path_template]["get"]["responses"]["200"]["content"]
    return {**to_json_schema(content["application/yaml"]["schema"]), "components": {}}


def test_the_inventory_export_is_a_yaml_mapping_as_documented(api_client_for, node):
    response = api_client_for("viewer").get("/api/inventory/export/")

    body = yaml.safe_load(response.content)
    assert response.status_code == 200 and body["clusters"][0]["nodes"][0]["name"] == "node0"
    Draft202012Validator(documented_yaml_schema("/api/inventory/export/")).validate(body)


def test_the_deployment_export_is_a_yaml_mapping_as_documented(api_client_for, cluster, credential,
                                                               make_user):
    from django.conf import settings

    from apps.deployments.services import deployment_create
    from apps.inventory.models import Node
    from tests.keys import TEST_HOST_KEY

    for i, (name, npus) in enumerate(REFERENCE_NODES):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.0.{20 + i}", credential=credential,
                            host_key=TEST_HOST_KEY, npu_count=npus)
    yaml_text = (settings.BASE_DIR / "examples" / "reference-topology-fixed.yaml").read_text()
    deployment = deployment_create(name="reference", cluster=cluster, user=make_user("operator", "owner"),
                                   yaml_text=yaml_text)

    response = api_client_for("viewer").get(f"/api/deployments/{deployment.pk}/export/")

    body = yaml.safe_load(response.content)
    assert response.status_code == 200 and body == yaml.safe_load(yaml_text)
    Draft202012Validator(documented_yaml_schema("/api/deployments/{id}/export/")).validate(body)


@pytest.mark.parametrize("method", ["post", "put"])
def test_a_username_outside_the_documented_pattern_is_a_400(api_client_for, make_user, method):
    admin = api_client_for("admin")
    body = {"username": "jürgen", "password": "s3cret-pass-word", "role": "viewer"}
    path = "/api/users/" if method == "post" else f"/api/users/{make_user('viewer', 'juergen').pk}/"

    response = getattr(admin, method)(path, body, format="json")

    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == ["username"]
