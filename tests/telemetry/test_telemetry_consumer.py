"""The deployment websocket: viewers of an existing deployment get each scrape round; others are refused."""

import pytest
from channels.db import database_sync_to_async

from apps.inventory.models import Cluster
from tests.ws_helpers import close_executor_connections, session_communicator  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def communicator_for(user, deployment_id):
    return await session_communicator(user, f"/ws/deployments/{deployment_id}/")


def _deployment():
    from apps.deployments.models import Deployment

    return Deployment.objects.create(name="ws", cluster=Cluster.objects.create(name="c"))


async def test_viewer_gets_each_scrape_round(make_user):
    from apps.telemetry.services import deployment_scrape

    user = await database_sync_to_async(make_user)("viewer")
    deployment = await database_sync_to_async(_deployment)()
    ws = await communicator_for(user, deployment.pk)
    connected, _ = await ws.connect()
    assert connected
    await database_sync_to_async(deployment_scrape)(deployment, [], fetch=lambda url: "")
    message = await ws.receive_json_from(timeout=5)
    assert message["type"] == "live" and message["live"]["instances"] == {} and message["live"]["stale"] is False
    await ws.disconnect()


async def test_user_without_role_is_refused(make_user):
    user = await database_sync_to_async(make_user)(None)
    deployment = await database_sync_to_async(_deployment)()
    ws = await communicator_for(user, deployment.pk)
    connected, _ = await ws.connect()
    assert not connected


async def test_unknown_deployment_is_refused(make_user):
    user = await database_sync_to_async(make_user)("viewer")
    ws = await communicator_for(user, 999999)
    connected, _ = await ws.connect()
    assert not connected


async def test_a_socket_idle_past_the_layers_blocking_read_stays_open_and_gets_the_next_round(make_user):
    """channels_redis blocks 5 s in BZPOPMIN per read; a Redis read timeout as short would end the consumer."""
    import asyncio

    from apps.telemetry.services import deployment_scrape

    user = await database_sync_to_async(make_user)("viewer")
    deployment = await database_sync_to_async(_deployment)()
    ws = await communicator_for(user, deployment.pk)
    connected, _ = await ws.connect()
    assert connected
    await asyncio.sleep(11)  # two of the layer's blocking reads, and then some
    assert await ws.receive_nothing(timeout=0.1)  # neither closed nor failed
    await database_sync_to_async(deployment_scrape)(deployment, [], fetch=lambda url: "")
    message = await ws.receive_json_from(timeout=5)
    assert message["type"] == "live"
    await ws.disconnect()
