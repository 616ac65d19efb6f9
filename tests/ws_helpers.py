"""Websocket test helpers: a communicator logged in as a user, and closing the ORM thread's connection."""

import pytest_asyncio
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator


@pytest_asyncio.fixture(autouse=True)
async def close_executor_connections():
    """database_sync_to_async runs in a shared thread whose connection would outlive the test database."""
    from django.db import connections

    yield
    await database_sync_to_async(connections.close_all)()


async def session_communicator(user, path: str) -> WebsocketCommunicator:
    """A websocket client carrying `user`'s session cookie, as a browser on the same origin would."""
    from django.test import Client

    from controlplane.asgi import application

    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    return WebsocketCommunicator(application, path, headers=[(b"cookie", cookie.encode()), (b"host", b"127.0.0.1"),
                                                             (b"origin", b"http://127.0.0.1")])
