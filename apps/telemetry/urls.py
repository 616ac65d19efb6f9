from django.urls import path

from . import views

app_name = "telemetry"

urlpatterns = [
    path("deployments/<int:pk>/topology.json", views.deployment_topology_json, name="topology-json"),
]
