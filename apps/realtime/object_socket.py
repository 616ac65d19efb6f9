"""A read-only websocket on one object: session-authenticated, role and object checked before joining the group
`<prefix>-<id>`; the group name is never taken from the client. Jobs and deployments subclass it."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.roles import Role, has_role

from .process_gauges import ProcessGauge

websocket_clients = ProcessGauge("websocket_clients")  # this process's open sockets, for /metrics


class ObjectGroupConsumer(AsyncJsonWebsocketConsumer):
    model = None  # the model whose row must exist
    url_kwarg = ""  # the URL route kwarg holding its id
    group_prefix = ""
    role = Role.VIEWER

    async def connect(self):
        object_id = self.scope["url_route"]["kwargs"][self.url_kwarg]
        if not await database_sync_to_async(self._may_watch)(self.scope.get("user"), object_id):
            await self.close(code=4403)
            return
        self.group = f"{self.group_prefix}-{object_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        websocket_clients.add(1)
        self.counted = True

    def _may_watch(self, user, object_id: int) -> bool:
        return bool(user) and has_role(user, self.role) and self.model.objects.filter(pk=object_id).exists()

    async def disconnect(self, code):
        if getattr(self, "counted", False):
            websocket_clients.add(-1)
            self.counted = False
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass  # read-only socket: the client backfills over REST

    async def relay(self, event):
        await self.send_json(event["payload"])
