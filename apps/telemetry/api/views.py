"""Telemetry API: a deployment's topology snapshot, at /api/deployments/<id>/topology/ beside the deployment."""

from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.response import Response

from apps.deployments.models import Deployment

from ..topology_snapshot import topology_snapshot
from .serializers import TopologySerializer


class DeploymentTopologyView(generics.GenericAPIView):
    queryset = Deployment.objects.select_related("cluster")
    serializer_class = TopologySerializer
    filter_backends = []  # one deployment by id: the deployment list's filters have nothing to do here
    pagination_class = None

    @extend_schema(operation_id="deployments_topology_retrieve", responses={200: TopologySerializer})
    def get(self, request, pk=None, format=None):
        """The active revision as a picture's data: nodes with their NPU dies, instances per DP rank with live
        state, and the request and KV edges derived from the plan; `problems` when it does not plan."""
        return Response(topology_snapshot(self.get_object()))
