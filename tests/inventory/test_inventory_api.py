"""Inventory API: constant queries per list, filters, secrets encrypted at rest, audit of every change."""

import pytest
from django.db import connection

from apps.inventory.models import Cluster, Node, Npu, SshCredential

pytestmark = pytest.mark.django_db


def make_nodes(cluster, credential, count, start=0):
    for i in range(start, start + count):
        node = Node.objects.create(cluster=cluster, name=f"n{i}", address=f"127.0.11.{i}", credential=credential)
        Npu.objects.bulk_create(Npu(node=node, npu_id=d // 2, chip_id=d % 2, logical_id=d, name="Ascend910",
                                    health="OK" if d else "Alarm", hbm_total_mb=65536) for d in range(4))


@pytest.mark.parametrize("url,expected_queries", [
    ("/api/nodes/", 4), ("/api/npus/", 4), ("/api/clusters/", 4), ("/api/credentials/", 4),
    ("/api/jobs/", 3), ("/api/audit/", 4), ("/api/users/", 5),
])
def test_list_queries_do_not_grow_with_rows(api_client_for, cluster, credential, django_assert_num_queries, url,
                                            expected_queries):
    client = api_client_for("admin")
    make_nodes(cluster, credential, 3)
    with django_assert_num_queries(expected_queries):
        assert client.get(url).status_code == 200
    make_nodes(cluster, credential, 6, start=3)
    Cluster.objects.create(name="second")
    with django_assert_num_queries(expected_queries):
        assert client.get(url).status_code == 200


def test_lists_are_paginated(api_client_for, cluster, credential):
    make_nodes(cluster, credential, 5)
    body = api_client_for("viewer").get("/api/npus/?limit=7").json()
    assert body["count"] == 20 and len(body["results"]) == 7 and body["next"]


def test_filters(api_client_for, cluster, credential):
    make_nodes(cluster, credential, 3)
    Node.objects.filter(name="n1").update(labels={"role": "decode"})
    client = api_client_for("viewer")
    assert client.get("/api/npus/?health=Alarm").json()["count"] == 3
    assert [n["name"] for n in client.get("/api/nodes/?label=role=decode").json()["results"]] == ["n1"]
    assert client.get("/api/nodes/?cluster_name=reference").json()["count"] == 3
    node = client.get("/api/nodes/?name=n2").json()["results"][0]
    assert node["npu_total"] == 4 and node["npu_unhealthy"] == 1


def test_bad_input_names_the_field(api_client_for, cluster):
    response = api_client_for("admin").post("/api/nodes/", {"cluster": cluster.pk, "name": "ok",
                                                            "address": "127.0.10.1", "ssh_port": 70000,
                                                            "host_key": "not a key", "labels": ["x"]},
                                            format="json")
    assert response.status_code == 400
    assert {"ssh_port", "host_key"} <= {e["field"] for e in response.json()["errors"]}


def test_malformed_json_is_a_400(api_client_for):
    response = api_client_for("admin").post("/api/clusters/", "{not json", content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]


def test_credentials_are_encrypted_at_rest(credential):
    from tests.keys import TEST_PRIVATE_KEY

    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM inventory_sshcredential WHERE id = %s", [credential.pk])
        raw = cursor.fetchone()[0]
    assert "PRIVATE KEY" not in raw and raw.startswith("gAAAA")  # a Fernet token
    assert SshCredential.objects.get(pk=credential.pk).secret == TEST_PRIVATE_KEY
    assert "PRIVATE" not in repr(credential) and "PRIVATE" not in str(credential)


def test_changes_are_audited_with_who_and_what(api_client_for, cluster, credential):
    client = api_client_for("admin")
    response = client.post("/api/nodes/", {"cluster": cluster.pk, "name": "new", "address": "127.0.10.9"},
                           format="json")
    node_id = response.json()["id"]
    client.patch(f"/api/nodes/{node_id}/", {"hardware_model": "Atlas 800I A3"}, format="json")
    client.patch(f"/api/credentials/{credential.pk}/", {"secret": "hunter2-password", "kind": "password"},
                 format="json")
    client.delete(f"/api/nodes/{node_id}/")
    entries = api_client_for("viewer").get("/api/audit/?object_type=inventory.node").json()["results"]
    assert [(e["action"], e["username"]) for e in entries] == [("delete", "api-admin"), ("update", "api-admin"),
                                                               ("create", "api-admin")]
    assert entries[1]["changes"] == {"hardware_model": ["", "Atlas 800I A3"]}
    cred_entry = api_client_for("viewer").get("/api/audit/?object_type=inventory.sshcredential&action=update").json()
    assert "hunter2" not in str(cred_entry)
    assert cred_entry["results"][0]["changes"]["secret"] == ["••••••", "••••••"]


def test_job_start_is_audited(api_client_for, node, django_capture_on_commit_callbacks, monkeypatch):
    from apps.jobs import tasks

    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda *a, **k: None)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client_for("operator").post(f"/api/nodes/{node.pk}/discover/")
    assert response.status_code == 202
    entry = api_client_for("viewer").get("/api/audit/?action=job").json()["results"][0]
    assert entry["username"] == "api-operator" and entry["changes"]["kind"] == [None, "discover"]
