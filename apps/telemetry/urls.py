from django.urls import path

from . import views

app_name = "telemetry"

urlpatterns = [
    path("deployments/<int:pk>/topology.json", views.deployment_topology_json, name="topology-json"),
    path("deployments/<int:pk>/instances/<str:name>/", views.instance_detail, name="instance"),
    path("deployments/<int:pk>/service-charts/", views.deployment_service_charts, name="service-charts"),
    path("deployments/<int:pk>/health-policy/", views.deployment_health_policy, name="health-policy"),
]
