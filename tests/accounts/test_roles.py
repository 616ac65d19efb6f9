"""Every endpoint enforces roles: a viewer reads but never writes, and never sees a secret."""

import pytest

from tests.keys import TEST_PRIVATE_KEY

pytestmark = pytest.mark.django_db

WRITE_CASES = [
    ("post", "/api/clusters/", {"name": "x"}),
    ("patch", "/api/clusters/{cluster}/", {"description": "x"}),
    ("delete", "/api/clusters/{cluster}/", None),
    ("post", "/api/nodes/", {"cluster": "{cluster}", "name": "n9", "address": "127.0.10.99"}),
    ("patch", "/api/nodes/{node}/", {"hardware_model": "x"}),
    ("delete", "/api/nodes/{node}/", None),
    ("post", "/api/nodes/{node}/discover/", None),
    ("post", "/api/nodes/{node}/fetch-host-key/", None),
    ("post", "/api/nodes/{node}/pin-host-key/", {"host_key": "ssh-ed25519 AAAA", "fingerprint": "x"}),
    ("post", "/api/credentials/", {"name": "c2", "username": "u", "secret": "pw", "kind": "password"}),
    ("patch", "/api/credentials/{credential}/", {"username": "v"}),
    ("delete", "/api/credentials/{credential}/", None),
    ("post", "/api/inventory/import/", {"text": "clusters: []"}),
    ("post", "/api/users/", {"username": "eve", "role": "admin", "password": "longpassword"}),
    ("post", "/api/jobs/{job}/cancel/", None),
]


@pytest.fixture
def objects(node, credential, make_user):
    from apps.jobs.choices import JobKind
    from apps.jobs.models import Job

    job = Job.objects.create(kind=JobKind.DISCOVER, target_type="inventory.node", target_id=node.pk,
                             target_label="node0")
    return {"cluster": node.cluster_id, "node": node.pk, "credential": credential.pk, "job": job.pk}


def _fill(value, objects):
    if isinstance(value, str):
        return value.format(**objects) if "{" in value else value
    if isinstance(value, dict):
        return {k: _fill(v, objects) for k, v in value.items()}
    return value


@pytest.mark.parametrize("method,url,body", WRITE_CASES)
def test_viewer_gets_403_on_every_write(api_client_for, objects, method, url, body):
    from apps.jobs.models import Job

    client = api_client_for("viewer")
    jobs_before = Job.objects.count()
    response = getattr(client, method)(_fill(url, objects), _fill(body, objects), format="json")
    assert response.status_code == 403, response.content
    assert Job.objects.count() == jobs_before


@pytest.mark.parametrize("method,url,body", [c for c in WRITE_CASES if "discover" in c[1] or "cancel" in c[1]])
def test_operator_may_start_and_cancel_jobs(api_client_for, objects, method, url, body, django_capture_on_commit_callbacks):
    response = getattr(api_client_for("operator"), method)(_fill(url, objects), body, format="json")
    assert response.status_code in (202, 409), response.content


@pytest.mark.parametrize("method,url,body", [c for c in WRITE_CASES if "discover" not in c[1] and "cancel" not in c[1]
                                             and "host-key" not in c[1]])
def test_operator_cannot_edit_inventory(api_client_for, objects, method, url, body):
    response = getattr(api_client_for("operator"), method)(_fill(url, objects), _fill(body, objects), format="json")
    assert response.status_code == 403


def test_user_without_role_sees_nothing(api_client_for, objects):
    client = api_client_for(None)
    for url in ("/api/clusters/", "/api/nodes/", "/api/npus/", "/api/jobs/", "/api/audit/"):
        assert client.get(url).status_code == 403, url


def test_anonymous_gets_401(client, objects):
    from rest_framework.test import APIClient

    assert APIClient().get("/api/nodes/").status_code == 401
    assert client.get("/").status_code == 302  # pages redirect to the login page


def test_every_page_requires_login(client, objects):
    for url in ["/", f"/clusters/{objects['cluster']}/", f"/nodes/{objects['node']}/", "/jobs/",
                f"/jobs/{objects['job']}/", "/audit/", "/inventory/import/", "/api/docs/"]:
        response = client.get(url)
        assert response.status_code in (302, 401, 403), url
        if response.status_code == 302:
            assert response["Location"].startswith("/login/"), url


def test_viewer_never_sees_a_secret(api_client_for, objects):
    client = api_client_for("viewer")
    secret_fragment = TEST_PRIVATE_KEY.splitlines()[1]
    urls = ["/api/credentials/", f"/api/credentials/{objects['credential']}/", "/api/nodes/",
            f"/api/nodes/{objects['node']}/", "/api/audit/", "/api/inventory/export/", "/api/clusters/"]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        assert secret_fragment not in body, url
        if "/audit/" in url:
            assert "\u2022\u2022\u2022" in body or "••••••" in body  # the change is recorded, masked
        else:
            assert '"secret"' not in body, url


def test_admin_creates_credential_and_secret_is_write_only(api_client_for):
    from apps.inventory.models import SshCredential

    response = api_client_for("admin").post("/api/credentials/", {"name": "k", "username": "simnode",
                                                                  "kind": "private_key", "secret": TEST_PRIVATE_KEY},
                                            format="json")
    assert response.status_code == 201, response.content
    assert "secret" not in response.json()
    assert response.json()["public_key"].startswith("ssh-ed25519 ")
    assert SshCredential.objects.get(name="k").secret == TEST_PRIVATE_KEY


def test_admin_gets_a_field_error_for_a_bad_key(api_client_for):
    response = api_client_for("admin").post("/api/credentials/", {"name": "k", "username": "simnode",
                                                                  "kind": "private_key", "secret": "not a key"},
                                            format="json")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["secret"]


def test_viewer_pages_hide_operator_buttons(client, make_user, objects):
    make_user("viewer", username="vv")
    client.login(username="vv", password="s3cret-pass-word")
    page = client.get(f"/nodes/{objects['node']}/").content.decode()
    assert "Discover NPUs" not in page
    assert client.post(f"/nodes/{objects['node']}/discover/").status_code == 403


SELF_SERVICE = {("post", "/api/auth/token/"), ("post", "/api/me/token/")}


def test_viewer_gets_403_on_every_write_in_the_schema(api_client_for, objects):
    """Generated from the OpenAPI schema, so a new write endpoint is covered without editing this test."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    client = api_client_for("viewer")
    checked = 0
    for path, operations in schema["paths"].items():
        for method in operations:
            if method in ("get", "head", "options") or (method, path) in SELF_SERVICE:
                continue
            url = path.replace("{id}", str(objects["node"] if "/nodes/" in path else
                                           objects["credential"] if "/credentials/" in path else
                                           objects["job"] if "/jobs/" in path else objects["cluster"]))
            response = getattr(client, method)(url, {}, format="json")
            assert response.status_code == 403, (method, url, response.status_code)
            checked += 1
    assert checked >= 15
