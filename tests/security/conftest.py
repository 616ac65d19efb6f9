"""Fixtures for the security tests: this test's own Redis key prefix, and switching PDCP_SECRETS_KEY mid-test."""

import copy
import os
import uuid

import pytest
from cryptography.fernet import Fernet


@pytest.fixture(autouse=True)
def own_cache_prefix(settings):
    """Lockout counters and poll locks live in Redis: another test or run must not see ours."""
    caches = copy.deepcopy(settings.CACHES)
    caches["default"]["KEY_PREFIX"] = f"pdcp-test-security-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.CACHES = caches


@pytest.fixture
def old_key() -> str:
    return Fernet.generate_key().decode()


@pytest.fixture
def new_key() -> str:
    return Fernet.generate_key().decode()


@pytest.fixture
def use_keys(settings):
    """use_keys(k1, k2, ...) acts as PDCP_SECRETS_KEY="k1,k2,..." from here on."""
    def use(*keys: str) -> None:
        settings.SECRETS_KEYS = tuple(keys)

    return use
