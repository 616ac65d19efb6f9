"""The playground page: GET draws it (any role; the form needs operator), POST sends one request and streams its
events back as text/event-stream (operator or admin). Thin: services.py does the work."""

from __future__ import annotations

import json

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_http_methods

from apps.accounts.api_errors import error_body, summary
from apps.accounts.roles import Role, has_role

from ..models import Deployment
from .request import DEFAULT_MAX_TOKENS, MAX_TOKENS_RANGE, TEMPERATURE_RANGE, PlaygroundInvalid
from .services import playground_sse, playground_start
from .target import PlaygroundRefused

NEEDS_OPERATOR = "the playground needs the operator role"


@require_http_methods(["GET", "POST"])
def playground_page(request, pk: int) -> HttpResponse:
    if not has_role(request.user, Role.VIEWER):
        return JsonResponse(error_body("you have no role"), status=403)
    deployment = get_object_or_404(Deployment.objects.select_related("cluster"), pk=pk)
    can_use = has_role(request.user, Role.OPERATOR)
    if request.method == "GET":
        return render(request, "deployments/playground.html", {
            "deployment": deployment, "can_use": can_use, "needs": NEEDS_OPERATOR,
            "max_tokens_range": MAX_TOKENS_RANGE, "default_max_tokens": DEFAULT_MAX_TOKENS,
            "temperature_range": TEMPERATURE_RANGE})
    if not can_use:
        return JsonResponse(error_body(NEEDS_OPERATOR), status=403)
    try:
        data = json.loads(request.body or b"null")
    except ValueError as exc:
        return JsonResponse(error_body(f"the body is not JSON: {exc}", [{"field": None, "message": str(exc)}]),
                            status=400)
    try:
        exchange = playground_start(deployment=deployment, user=request.user, data=data)
    except PlaygroundInvalid as exc:
        return JsonResponse(error_body(summary(exc.errors), exc.errors), status=400)
    except PlaygroundRefused as exc:
        return JsonResponse(error_body(str(exc)), status=409)
    response = StreamingHttpResponse(playground_sse(exchange, deployment=deployment, user=request.user),
                                     content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
