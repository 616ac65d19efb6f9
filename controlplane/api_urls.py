"""Every REST endpoint, under /api/."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter
from rest_framework.urlpatterns import format_suffix_patterns

from apps.accounts.api.views import MeView, MyTokenView, ObtainTokenView, UserViewSet
from apps.audit.api.views import AuditEntryViewSet
from apps.deployments.api.views import DeploymentViewSet, ProcessViewSet, RevisionViewSet
from apps.deployments.playground.api import DeploymentPlaygroundView
from apps.evals.api.advisor import EvalAdvisorView
from apps.evals.api.imports import EvalImportView
from apps.evals.api.views import EvalCompareView, EvalDatasetViewSet, EvalRunViewSet, EvalSweepViewSet
from apps.inventory.api.views import (
    ClusterViewSet,
    InventoryExportView,
    InventoryImportView,
    NodeViewSet,
    NpuViewSet,
    SshCredentialViewSet,
)
from apps.jobs.api.views import JobViewSet, WorkersView
from apps.telemetry.api.health import DeploymentHealthPolicyView, DeploymentHealthView
from apps.telemetry.api.history import DeploymentHistoryView
from apps.telemetry.api.prometheus import PrometheusSdView
from apps.telemetry.api.views import DeploymentTopologyView

router = DefaultRouter()
router.register("clusters", ClusterViewSet)
router.register("nodes", NodeViewSet)
router.register("npus", NpuViewSet)
router.register("credentials", SshCredentialViewSet)
router.register("jobs", JobViewSet)
router.register("audit", AuditEntryViewSet)
router.register("users", UserViewSet)
router.register("deployments", DeploymentViewSet)
router.register("revisions", RevisionViewSet)
router.register("processes", ProcessViewSet)
router.register("evals/runs", EvalRunViewSet, basename="eval-run")
router.register("evals/sweeps", EvalSweepViewSet, basename="eval-sweep")
router.register("evals/datasets", EvalDatasetViewSet, basename="eval-dataset")

urlpatterns = [
    path("auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("me/", MeView.as_view(), name="api-me"),
    path("me/token/", MyTokenView.as_view(), name="api-my-token"),
    path("inventory/import/", InventoryImportView.as_view(), name="api-inventory-import"),
    path("inventory/export/", InventoryExportView.as_view(), name="api-inventory-export"),
    path("workers/", WorkersView.as_view(), name="api-workers"),
    path("prometheus/sd/", PrometheusSdView.as_view(), name="api-prometheus-sd"),
    path("evals/compare/", EvalCompareView.as_view(), name="eval-compare"),
    path("evals/advisor/", EvalAdvisorView.as_view(), name="eval-advisor"),
    path("evals/import/", EvalImportView.as_view(), name="eval-import"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    # Same pattern (and .json suffix) the router gave this action when DeploymentViewSet served it.
    *format_suffix_patterns([re_path(r"^deployments/(?P<pk>[^/.]+)/topology/$", DeploymentTopologyView.as_view(),
                                     name="deployment-topology")]),
    path("deployments/<int:pk>/history/", DeploymentHistoryView.as_view(), name="deployment-history"),
    path("deployments/<int:pk>/health-policy/", DeploymentHealthPolicyView.as_view(), name="deployment-health-policy"),
    path("deployments/<int:pk>/playground/", DeploymentPlaygroundView.as_view(), name="deployment-playground"),
    path("deployments/<int:pk>/health/", DeploymentHealthView.as_view(), name="deployment-health"),
    path("", include(router.urls)),
]
