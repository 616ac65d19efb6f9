"""ASGI entry: HTTP goes to Django, websockets to Channels consumers (session-authenticated)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.signals import request_finished  # noqa: E402
from django.db import connections  # noqa: E402


def close_request_connections(**kwargs) -> None:
    """An HTTP request's sync code runs in a thread of its own that ends with the request: a connection kept for
    reuse (CONN_MAX_AGE) would stay open with that thread, one per request served, until PostgreSQL refuses every
    client (tests/reliability/test_rest_api_load.py). The websocket consumers' one database thread keeps its own."""
    for conn in connections.all(initialized_only=True):
        conn.close()


request_finished.connect(close_request_connections, sender=ASGIHandler)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from .routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
