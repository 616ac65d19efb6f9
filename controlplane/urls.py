from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("controlplane.api_urls")),
    path("deployments/", include("apps.deployments.urls")),
    path("", include("apps.ui.urls")),
]
