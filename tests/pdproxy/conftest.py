"""The `cluster` fixture: processes started for one test and stopped by PID at its end."""

import pytest

from tests.pdproxy.proxy_procs import Cluster


@pytest.fixture
def cluster():
    c = Cluster()
    try:
        yield c
    finally:
        c.stop_all()
