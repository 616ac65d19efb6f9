"""Telemetry pages: the topology picture's data for a deployment's page, an instance's page with its history charts,
and the deployment page's charts of the proxy and the pool."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from apps.accounts.access import viewer_required
from apps.accounts.roles import Role, has_role
from apps.deployments.logs import LogUnavailable, process_log_tail
from apps.deployments.models import Deployment

from .health.policy import (
    FIELDS,
    LIMITS,
    health_of,
    health_policy_of,
    health_policy_problems,
    health_policy_set,
)
from .history import WINDOWS
from .instance_page import SERVICE_CHARTS, InstanceNotFound, charts_with_history, instance_page
from .topology_snapshot import topology_snapshot

LOG_LINES = 40
DEFAULT_WINDOW = "15m"  # a fresh deploy fills it within minutes; longer windows are a click away


@viewer_required
def deployment_topology_json(request, pk):
    """The topology picture's data (static/js/topology/ draws it); problems in the body when it does not plan."""
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    return JsonResponse(topology_snapshot(deployment), json_dumps_params={"ensure_ascii": False})


def _charts_context(deployment, charts, section_id, title):
    return {"charts": charts, "charts_section_id": section_id, "charts_title": title, "windows": list(WINDOWS.items()),
            "default_window": DEFAULT_WINDOW, "history_url": reverse("deployment-history", kwargs={"pk": deployment.pk})}


@viewer_required
def instance_detail(request, pk, name):
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    try:
        page = instance_page(deployment, name)
    except InstanceNotFound as exc:
        raise Http404(str(exc)) from None
    log_text, log_error = "", None
    first = page.first_process
    if first is not None:
        try:
            log_text = process_log_tail(first, lines=LOG_LINES)
        except LogUnavailable as exc:
            log_error = str(exc)
    return render(request, "telemetry/instance.html", {
        "deployment": deployment, "page": page, "log_process": first, "log_text": log_text, "log_error": log_error,
        "log_lines": LOG_LINES, **_charts_context(deployment, page.charts, "instance-charts", "History")})


@viewer_required
def deployment_service_charts(request, pk):
    """The deployment page's "Proxy and pool" charts, loaded into it by htmx."""
    deployment = get_object_or_404(Deployment, pk=pk)
    charts = charts_with_history(deployment, SERVICE_CHARTS)
    return render(request, "telemetry/_charts.html",
                  _charts_context(deployment, charts, "service-charts", "Proxy and pool"))


@viewer_required
def deployment_health_policy(request, pk):
    """The deployment page's health section (loaded by htmx); POST (operators) saves the policy and shows it again,
    every bad value named beside its field."""
    deployment = get_object_or_404(Deployment, pk=pk)
    policy, errors, saved = health_policy_of(deployment), {}, False
    values = {name: getattr(policy, name) for name in FIELDS}
    if request.method == "POST":
        if not has_role(request.user, Role.OPERATOR):
            raise PermissionDenied("changing the health policy needs the operator role")
        values = {**{k: request.POST.get(k, "") for k in LIMITS}, "auto_restart": request.POST.get("auto_restart") == "on"}
        errors = health_policy_problems(values)
        if not errors:
            policy, saved = health_policy_set(deployment=deployment, values=values), True
            if not request.headers.get("HX-Request"):
                messages.success(request, "health policy saved")
                return redirect(reverse("deployments:detail", kwargs={"pk": deployment.pk}) + "#health-policy")
    found = health_of(deployment, limit=20)
    return render(request, "telemetry/_health_policy.html", {
        "deployment": deployment, "policy": policy, "values": values, "errors": errors, "saved": saved,
        "limits": LIMITS, "states": found["states"], "events": found["events"]}, status=400 if errors else 200)
