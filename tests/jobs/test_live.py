"""Job events reach a websocket subscriber after commit, and only users with a role may subscribe."""

import pytest
from channels.db import database_sync_to_async

from apps.jobs.choices import JobKind
from apps.jobs.models import Job
from apps.jobs.services import job_event_add
from tests.ws_helpers import close_executor_connections, session_communicator  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def communicator_for(user, job_id):
    return await session_communicator(user, f"/ws/jobs/{job_id}/")


async def test_events_are_pushed_to_subscribers(make_user):
    user = await database_sync_to_async(make_user)("viewer")
    job = await database_sync_to_async(Job.objects.create)(kind=JobKind.DISCOVER, target_type="inventory.node",
                                                           target_id=1)
    ws = await communicator_for(user, job.pk)
    connected, _ = await ws.connect()
    assert connected
    await database_sync_to_async(job_event_add)(job, 1, text="hello", node="node0")
    message = await ws.receive_json_from(timeout=5)
    assert message["type"] == "event" and message["counter"] == 1 and message["text"] == "hello"
    await ws.disconnect()


async def test_user_without_role_is_refused(make_user):
    user = await database_sync_to_async(make_user)(None)
    job = await database_sync_to_async(Job.objects.create)(kind=JobKind.DISCOVER, target_type="inventory.node",
                                                           target_id=1)
    ws = await communicator_for(user, job.pk)
    connected, code = await ws.connect()
    assert not connected


async def test_unknown_job_is_refused(make_user):
    user = await database_sync_to_async(make_user)("viewer")
    ws = await communicator_for(user, 999999)
    connected, _ = await ws.connect()
    assert not connected
