"""Reliability cases (docs/reliability.md): faults, bad input, access and load. Light cases run in `make test`;
those marked `reliability` run with `make reliability`. Each writes its figure with `record_figure`.

Addresses 127.0.10.10-.49 belong to these tests (docs/contracts.md §2), each module its own slice."""

import pytest

from tests.reliability.figures import record_figure


@pytest.fixture
def figure():
    """record_figure, for a test to write what it measured."""
    return record_figure
