"""Websocket of one deployment's live state: session-authenticated, viewer role, the deployment checked to exist
before joining the group `deployment-<id>`. Read-only: the page reads the snapshot over HTTP, then this."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.roles import Role, has_role
from apps.deployments.models import Deployment


class DeploymentLiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        deployment_id = self.scope["url_route"]["kwargs"]["deployment_id"]
        if not await database_sync_to_async(self._may_watch)(user, deployment_id):
            await self.close(code=4403)
            return
        self.group = f"deployment-{deployment_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    @staticmethod
    def _may_watch(user, deployment_id: int) -> bool:
        return bool(user) and has_role(user, Role.VIEWER) and Deployment.objects.filter(pk=deployment_id).exists()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass

    async def relay(self, event):
        await self.send_json(event["payload"])
