from django.contrib import admin
from django.urls import include, path

from apps.telemetry.ecosystem.views import control_plane_metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("controlplane.api_urls")),
    path("metrics", control_plane_metrics, name="control-plane-metrics"),
    path("deployments/", include("apps.deployments.urls")),
    path("evals/", include("apps.evals.urls")),
    path("", include("apps.telemetry.urls")),
    path("", include("apps.inventory.urls")),
    path("", include("apps.jobs.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.ui.urls")),
]

handler404 = "apps.accounts.api_errors.not_found"
