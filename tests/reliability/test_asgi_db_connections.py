"""An HTTP request served through the ASGI application (as daphne serves it) leaves no database connection open
behind it. Each request's sync code runs in a thread of its own; with CONN_MAX_AGE the connection stayed with that
ended thread, one per request served, until PostgreSQL answered "too many clients already" to everyone
(test_rest_api_load.py: 57 of 425 requests failed so, before controlplane/asgi.py closed them)."""

import asyncio
import time

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)
REQUESTS = 12


APP_NAME = "pdcp-asgi-connections-test"  # set on the connections the requests open, and only on those


def open_connections() -> int:
    """Connections of this database opened under APP_NAME: the requests' own, not another process's (a loaded
    machine's lingering daphne or worker opening one meanwhile counted once as a leak)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = %s AND pid <> pg_backend_pid()", [APP_NAME])
        return cursor.fetchone()[0]


async def get_nodes(application, token: str) -> int:
    from channels.testing import HttpCommunicator

    communicator = HttpCommunicator(application, "GET", "/api/nodes/",
                                    headers=[(b"authorization", f"Token {token}".encode()), (b"host", b"127.0.0.1")])
    response = await communicator.get_response(timeout=30)
    await communicator.wait(timeout=30)  # the application ends after the body is sent, as under daphne
    return response["status"]


def test_asgi_requests_leave_no_database_connection_behind(make_user, monkeypatch, figure):
    from rest_framework.authtoken.models import Token

    from controlplane.asgi import application

    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL's connections")
    token = Token.objects.create(user=make_user("viewer")).key
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)  # as controlplane/settings.py serves
    # the request threads' connections are made from this same settings dict (the test's own one is already open)
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {**connection.settings_dict["OPTIONS"],
                                                              "application_name": APP_NAME})
    before = open_connections()
    statuses = [asyncio.run(get_nodes(application, token)) for _ in range(REQUESTS)]
    # A closed connection leaves pg_stat_activity once its server process has exited, which a loaded machine delays
    # (a loaded run counted one a moment after it was closed); a leaked one stays for CONN_MAX_AGE (60 s).
    deadline = time.monotonic() + 10
    while (left_open := max(0, open_connections() - before)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert statuses == [200] * REQUESTS
    assert left_open == 0, f"{left_open} connections left open by {REQUESTS} requests"
    figure("asgi-request-connections",
           held=f"{REQUESTS} authenticated API requests through the ASGI application (CONN_MAX_AGE 60, as served) "
                "leave no database connection open",
           figure=f"{REQUESTS} requests, {left_open} connections left open (one per request before the fix)",
           command='make test PYTEST_ARGS="tests/reliability/test_asgi_db_connections.py"',
           values={"requests": REQUESTS, "left_open": left_open})
