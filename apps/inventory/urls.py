from django.urls import path

from . import views

app_name = "inventory"

urlpatterns = [
    path("clusters/<int:pk>/", views.cluster_detail, name="cluster"),
    path("clusters/<int:pk>/discover/", views.cluster_discover_action, name="cluster-discover"),
    path("nodes/<int:pk>/", views.node_detail, name="node"),
    path("nodes/<int:pk>/npus/", views.node_npus, name="node-npus"),
    path("nodes/<int:pk>/discover/", views.node_discover_action, name="node-discover"),
    path("nodes/<int:pk>/host-key/", views.node_host_key, name="node-host-key"),
    path("inventory/import/", views.inventory_import_page, name="import"),
    path("inventory/export/", views.inventory_export_download, name="export"),
]
