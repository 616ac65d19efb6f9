"""The proxy's admin token is a secret like SSH credentials: encrypted at rest, never in the API or the audit."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_proxy_admin_token_is_encrypted_at_rest_and_never_shown(deployment, api_client_for):
    from apps.deployments.models import Deployment

    token = Deployment.objects.get(pk=deployment.pk).proxy_admin_token
    assert len(token) >= 40
    with connection.cursor() as cursor:
        cursor.execute("SELECT proxy_admin_token FROM deployments_deployment WHERE id = %s", [deployment.pk])
        raw = cursor.fetchone()[0]
    assert raw.startswith("gAAAA") and token not in raw
    client = api_client_for("admin")
    for url in (f"/api/deployments/{deployment.pk}/", "/api/deployments/", "/api/audit/"):
        assert token not in client.get(url).content.decode(), url
