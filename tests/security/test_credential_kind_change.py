"""Changing a credential's kind without a new secret is refused (issue 8, item 10): the stored secret is of the old
kind, and a private key must never go to the nodes as a password."""

import pytest
from django.db import connection
from django.test import Client

from apps.inventory.choices import CredentialKind
from apps.inventory.models import SshCredential
from apps.inventory.services import inventory_import
from tests.keys import TEST_PRIVATE_KEY

pytestmark = pytest.mark.django_db
NEEDS_SECRET = "a new secret is required when the kind changes"


def stored_secret(pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM inventory_sshcredential WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_the_api_refuses_a_kind_change_without_a_secret_and_changes_nothing(api_client_for, credential):
    before = stored_secret(credential.pk)
    response = api_client_for("admin").patch(f"/api/credentials/{credential.pk}/", {"kind": "password"},
                                             format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "secret", "message": NEEDS_SECRET}]
    credential.refresh_from_db()
    assert credential.kind == CredentialKind.PRIVATE_KEY and stored_secret(credential.pk) == before


def test_the_api_changes_the_kind_with_a_new_secret(api_client_for, credential):
    response = api_client_for("admin").patch(f"/api/credentials/{credential.pk}/",
                                             {"kind": "password", "secret": "a-new-password"}, format="json")
    assert response.status_code == 200, response.content
    credential.refresh_from_db()
    assert credential.kind == CredentialKind.PASSWORD and credential.secret == "a-new-password"
    assert credential.public_key == ""  # the old key's public half no longer describes anything


def test_a_put_with_the_same_kind_and_no_secret_keeps_the_secret(api_client_for, credential):
    response = api_client_for("admin").put(f"/api/credentials/{credential.pk}/",
                                           {"name": "sim", "username": "other", "kind": "private_key"}, format="json")
    assert response.status_code == 200, response.content
    assert SshCredential.objects.get(pk=credential.pk).secret == TEST_PRIVATE_KEY


def test_the_admin_form_refuses_a_kind_change_without_a_secret(credential, django_user_model):
    before = stored_secret(credential.pk)
    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("boss", password="s3cret-pass-word"))
    page = admin.post(f"/admin/inventory/sshcredential/{credential.pk}/change/",
                      {"name": "sim", "username": "simnode", "kind": "password", "new_secret": ""})
    assert page.status_code == 200 and NEEDS_SECRET in page.content.decode()
    credential.refresh_from_db()
    assert credential.kind == CredentialKind.PRIVATE_KEY and stored_secret(credential.pk) == before


def test_an_inventory_file_naming_a_credential_without_a_secret_keeps_its_kind(db):
    SshCredential.objects.create(name="pw", username="simnode", kind=CredentialKind.PASSWORD, secret="hunter2-pw")
    inventory_import("version: 1\ncredentials:\n  - name: pw\n    username: simnode\nclusters: []\n")
    cred = SshCredential.objects.get(name="pw")
    assert cred.kind == CredentialKind.PASSWORD and cred.secret == "hunter2-pw"
