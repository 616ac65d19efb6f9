"""Websocket for one job: session-authenticated, access checked before joining the group `job-<id>`."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.roles import Role, has_role

from .models import Job


class JobConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        job_id = self.scope["url_route"]["kwargs"]["job_id"]
        if not await database_sync_to_async(self._may_watch)(user, job_id):
            await self.close(code=4403)
            return
        self.group = f"job-{job_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    @staticmethod
    def _may_watch(user, job_id: int) -> bool:
        return bool(user) and has_role(user, Role.VIEWER) and Job.objects.filter(pk=job_id).exists()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass  # read-only socket: the client backfills over REST

    async def relay(self, event):
        await self.send_json(event["payload"])
