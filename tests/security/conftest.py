"""Fixtures for the security tests: this test's own Redis key prefix, and switching PDCP_SECRETS_KEY mid-test."""


import pytest
from cryptography.fernet import Fernet


@pytest.fixture(autouse=True)
def _own_cache(own_cache_prefix):
    """Lockout counters and poll locks live in Redis: another test or run must not see ours."""


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
