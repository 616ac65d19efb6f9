"""Telemetry pages: the topology picture's data for a deployment's page."""

from django.http import JsonResponse
from django.shortcuts import get_object_or_404

from apps.accounts.access import viewer_required
from apps.deployments.models import Deployment

from .topology_snapshot import topology_snapshot


@viewer_required
def deployment_topology_json(request, pk):
    """The topology picture's data (static/js/topology.js draws it); problems in the body when it does not plan."""
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    return JsonResponse(topology_snapshot(deployment), json_dumps_params={"ensure_ascii": False})
