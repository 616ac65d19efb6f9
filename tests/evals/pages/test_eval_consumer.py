"""The eval run websocket: a viewer of an existing run hears each emitted state; anonymous users and unknown runs
are refused before joining the group."""

import pytest
from channels.db import database_sync_to_async

from tests.ws_helpers import close_executor_connections, session_communicator  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def test_a_viewer_hears_each_emitted_state(make_user, make_run):
    from apps.evals.services import eval_emit

    user = await database_sync_to_async(make_user)("viewer")
    run = await database_sync_to_async(make_run)(status="running", progress_done=2, progress_total=8,
                                                 phase="accuracy: running")
    ws = await session_communicator(user, f"/ws/evalruns/{run.pk}/")
    connected, _ = await ws.connect()
    assert connected
    await database_sync_to_async(eval_emit)(run)
    message = await ws.receive_json_from(timeout=5)
    assert message["type"] == "eval" and message["id"] == run.pk and message["status"] == "running"
    assert (message["done"], message["total"], message["percent"]) == (2, 8, 25)
    await ws.disconnect()


async def test_anonymous_users_are_refused(make_run):
    from channels.testing import WebsocketCommunicator

    from controlplane.asgi import application

    run = await database_sync_to_async(make_run)()
    ws = WebsocketCommunicator(application, f"/ws/evalruns/{run.pk}/",
                               headers=[(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")])
    connected, _ = await ws.connect()
    assert not connected


async def test_an_unknown_run_is_refused(make_user):
    user = await database_sync_to_async(make_user)("viewer")
    ws = await session_communicator(user, "/ws/evalruns/999999/")
    connected, _ = await ws.connect()
    assert not connected
