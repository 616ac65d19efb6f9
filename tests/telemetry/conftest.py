"""Telemetry tests keep their Redis keys under a prefix of their own, so parallel runs never read each other's."""

import copy
import os
import uuid

import pytest


@pytest.fixture(autouse=True)
def isolated_cache(settings):
    caches = copy.deepcopy(settings.CACHES)
    caches["default"]["KEY_PREFIX"] = f"pdcp-test-telemetry-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.CACHES = caches  # pytest-django restores it; the keys expire with LIVE_TTL_S
    yield
