"""Websocket of one deployment's live state (group `deployment-<id>`). Read-only: the page reads the snapshot
over HTTP, then this."""

from apps.deployments.models import Deployment
from apps.realtime.object_socket import ObjectGroupConsumer


class DeploymentLiveConsumer(ObjectGroupConsumer):
    model = Deployment
    url_kwarg = "deployment_id"
    group_prefix = "deployment"
