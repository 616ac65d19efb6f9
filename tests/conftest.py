"""Shared fixtures. Django is imported lazily so the Django-free suites (pdproxy, simcluster) also run alone."""

import os

import pytest

os.environ.setdefault("PDCP_CHANNEL_PREFIX", f"pdcp-test-{os.getpid()}")


@pytest.fixture
def make_user(db):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role

    def make(role: str | None, username: str | None = None, password: str = "s3cret-pass-word"):
        user = get_user_model().objects.create_user(username=username or f"{role or 'norole'}-user",
                                                    password=password)
        if role:
            set_role(user, Role(role))
        return user

    return make


@pytest.fixture
def api_client_for(make_user):
    """An API client authenticated with a real token for a user of the given role."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def client_for(role: str | None):
        user = make_user(role, username=f"api-{role or 'none'}")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        client.user = user
        return client

    return client_for


@pytest.fixture
def cluster(db):
    from apps.inventory.models import Cluster

    return Cluster.objects.create(name="reference", description="test cluster")


@pytest.fixture
def credential(db):
    from apps.inventory.models import SshCredential
    from apps.inventory.services import credential_save

    return credential_save(SshCredential(name="sim", username="simnode"), secret=TEST_PRIVATE_KEY)


@pytest.fixture
def node(cluster, credential):
    from apps.inventory.models import Node

    return Node.objects.create(cluster=cluster, name="node0", address="127.0.10.171", ssh_port=22,
                               credential=credential, host_key=TEST_HOST_KEY, hardware_model="Atlas 800I A3",
                               npu_count=16)


def generate_key_pair(seed: bytes | None = None) -> tuple[str, str]:
    """An ed25519 key: (OpenSSH private key text, public key line); fixed when seeded."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(seed) if seed else Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


# Seeded: this module is imported both as pytest's conftest and as tests.conftest, and both must agree.
TEST_PRIVATE_KEY, _ = generate_key_pair(b"\x01" * 32)
_, TEST_HOST_KEY = generate_key_pair(b"\x02" * 32)
