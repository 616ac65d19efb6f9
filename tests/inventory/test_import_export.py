"""Inventory files: a good one applies in one transaction, a bad one is rejected whole with line and field."""

from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from apps.inventory.inventory_file import InventoryFileInvalid
from apps.inventory.models import Cluster, Node, SshCredential
from apps.inventory.services import inventory_export, inventory_import

pytestmark = pytest.mark.django_db
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reference-cluster.yaml"


def test_reference_cluster_example_imports():
    counts = inventory_import(EXAMPLE.read_text())
    assert counts["clusters"] == 1 and counts["nodes_created"] == 6
    a3 = Node.objects.filter(hardware_model="Atlas 800I A3")
    assert a3.count() == 4 and all(n.npu_count == 16 for n in a3)
    assert set(Node.objects.values_list("name", flat=True)) == {"node0", "node1", "node2", "node3", "proxy", "bench"}


def test_import_is_idempotent_and_updates_in_place():
    inventory_import(EXAMPLE.read_text())
    changed = EXAMPLE.read_text().replace("address: 127.0.10.6", "address: 127.0.10.16")
    counts = inventory_import(changed)
    assert counts["nodes_created"] == 0 and counts["nodes_updated"] == 6
    assert Node.objects.get(name="bench").address == "127.0.10.16"


BAD = """version: 1
credentials:
  - name: k
    username: simnode
    password: pw
clusters:
  - name: c1
    nodes:
      - name: n1
        address: 127.0.10.1
        ssh_port: twenty-two
      - name: n2
        address: 127.0.10.2
        credential: nope
        colour: blue
"""


def test_bad_file_names_line_and_field_and_changes_nothing():
    Cluster.objects.create(name="existing")
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import(BAD)
    errors = {(e.line, e.field) for e in info.value.errors}
    assert (11, "clusters[0].nodes[0].ssh_port") in errors
    assert (15, "clusters[0].nodes[1].colour") in errors
    assert list(Cluster.objects.values_list("name", flat=True)) == ["existing"]
    assert not SshCredential.objects.exists()


def test_error_found_while_applying_rolls_back_everything():
    text = BAD.replace("ssh_port: twenty-two", "ssh_port: 22").replace("        colour: blue\n", "")
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import(text)
    assert [(e.line, "unknown credential" in e.message) for e in info.value.errors] == [(12, True)]
    assert not Node.objects.exists() and not Cluster.objects.exists() and not SshCredential.objects.exists()


def test_yaml_syntax_error_names_the_line():
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import("clusters:\n  - name: a\n    nodes: [\n")
    assert info.value.errors[0].line >= 3 and info.value.errors[0].field == "(syntax)"


def test_model_validation_errors_carry_the_line():
    text = "clusters:\n  - name: c\n    nodes:\n      - {name: 'bad name!', address: 127.0.10.1}\n"
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import(text)
    assert info.value.errors[0].line == 4 and "name" in info.value.errors[0].field


def test_duplicate_address_is_rejected():
    text = ("clusters:\n  - name: c\n    nodes:\n      - {name: a, address: 127.0.10.1}\n"
            "      - {name: b, address: 127.0.10.1}\n")
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import(text)
    assert info.value.errors[0].line == 5
    assert not Node.objects.exists()


def test_key_files_only_from_the_command_line(tmp_path):
    from tests.keys import TEST_PRIVATE_KEY

    (tmp_path / "id").write_text(TEST_PRIVATE_KEY)
    text = f"credentials:\n  - {{name: k, username: u, private_key_file: {tmp_path / 'id'}}}\nclusters: []\n"
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import(text)
    assert "manage.py import_inventory" in info.value.errors[0].message
    inventory_import(text, allow_key_files=True)
    assert SshCredential.objects.get(name="k").secret == TEST_PRIVATE_KEY


CSV = """cluster,name,address,ssh_port,npu_count,labels
c1,n1,127.0.10.1,22,16,role=prefill;rack=r1
c1,n2,127.0.10.2,x,16,
"""


def test_csv_nodes_errors_and_success():
    with pytest.raises(InventoryFileInvalid) as info:
        inventory_import(CSV)
    assert [(e.line, e.field) for e in info.value.errors] == [(3, "ssh_port")]
    assert not Node.objects.exists()
    inventory_import(CSV.replace(",x,", ",22,"))
    assert Node.objects.get(name="n1").labels == {"role": "prefill", "rack": "r1"}


def test_export_round_trips_without_secrets(credential):
    inventory_import(EXAMPLE.read_text())
    exported = inventory_export()
    text = yaml.safe_dump(exported)
    assert "change-me-before-use" not in text and "password" not in text
    Node.objects.all().delete()
    counts = inventory_import(text)
    assert counts["nodes_created"] == 6


def test_api_import_reports_errors_by_line(api_client_for):
    response = api_client_for("admin").post("/api/inventory/import/", {"text": BAD}, format="json")
    assert response.status_code == 400
    assert {"line": 11, "field": "clusters[0].nodes[0].ssh_port",
            "message": "expected a whole number, got 'twenty-two'"} in response.json()["errors"]


def test_api_import_upload(api_client_for):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("inv.yaml", EXAMPLE.read_bytes(), content_type="application/yaml")
    response = api_client_for("admin").post("/api/inventory/import/", {"file": upload}, format="multipart")
    assert response.status_code == 200, response.content
    assert response.json()["nodes_created"] == 6


def test_upload_page_shows_errors_in_place(client, make_user):
    make_user("admin", username="boss")
    client.login(username="boss", password="s3cret-pass-word")
    response = client.post("/inventory/import/", {"text": BAD})
    assert response.status_code == 400
    page = response.content.decode()
    assert "nothing was changed" in page and "clusters[0].nodes[0].ssh_port" in page and "<td>11</td>" in page


def test_import_command(tmp_path, capsys):
    call_command("import_inventory", str(EXAMPLE))
    assert Node.objects.count() == 6
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("import_inventory", str(bad))
    assert f"{bad}:11: clusters[0].nodes[0].ssh_port" in capsys.readouterr().err


def test_nodes_csv_export_round_trips(api_client_for):
    inventory_import(EXAMPLE.read_text())
    response = api_client_for("viewer").get("/api/inventory/export/?as=csv")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    text = response.content.decode()
    assert text.splitlines()[0].startswith("cluster,name,address")
    assert "reference,node2,127.0.10.3,22,,cluster-ops,," in text and "role=decode;kv_port=30200" in text
    Node.objects.all().delete()
    assert inventory_import(text)["nodes_created"] == 6
    assert Node.objects.get(name="node2").labels == {"role": "decode", "kv_port": "30200"}


def test_yaml_with_a_non_text_key_is_a_400_not_a_crash(api_client_for):
    response = api_client_for("admin").post("/api/inventory/import/", {"text": "clusters:\n  ? [a]\n  : 1\n"},
                                            format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["line"] == 2
