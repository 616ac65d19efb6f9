"""Telemetry tests keep their Redis keys under a prefix of their own, so parallel runs never read each other's."""


import pytest


@pytest.fixture(autouse=True)
def isolated_cache(own_cache_prefix):
    """The keys expire with LIVE_TTL_S."""
