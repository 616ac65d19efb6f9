"""GET /metrics: the control plane's own metrics in Prometheus' text format (selfmetrics.py), for a viewer's API
token (Prometheus' `authorization: {type: Token}`) or a logged-in session; a 401 or 403 without one.

A plain Django view, not a DRF one: drf-spectacular derives every operation's tag from the common prefix of all DRF
views' paths, and one outside /api/ would move it to "/". The token is checked by the API's own authentication.
"""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from apps.accounts.authentication import ExpiringTokenAuthentication
from apps.accounts.roles import Role, has_role

from .selfmetrics import metrics_text


def token_user(request):
    """The user of a valid `Authorization: Token <key>` header; None without one; AuthenticationFailed if bad."""
    found = ExpiringTokenAuthentication().authenticate(Request(request))
    return found[0] if found else None


@login_not_required  # Prometheus has no session to be redirected with: it is checked here, a 401 without a token
@require_GET
def control_plane_metrics(request):
    try:
        user = request.user if request.user.is_authenticated else token_user(request)
    except AuthenticationFailed as exc:
        return HttpResponse(f"{exc.detail}\n", status=401, content_type="text/plain",
                            headers={"WWW-Authenticate": "Token"})
    if user is None:
        return HttpResponse("send an API token (Authorization: Token <key>) or log in\n", status=401,
                            content_type="text/plain", headers={"WWW-Authenticate": "Token"})
    if not has_role(user, Role.VIEWER):
        return HttpResponse("this needs the viewer role\n", status=403, content_type="text/plain")
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
