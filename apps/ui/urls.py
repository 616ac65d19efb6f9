from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts.forms import ThrottledAuthenticationForm

from . import views

app_name = "ui"

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="ui/login.html",
                                                authentication_form=ThrottledAuthenticationForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.dashboard, name="dashboard"),
    path("clusters/<int:pk>/", views.cluster_detail, name="cluster"),
    path("clusters/<int:pk>/discover/", views.cluster_discover_action, name="cluster-discover"),
    path("nodes/<int:pk>/", views.node_detail, name="node"),
    path("nodes/<int:pk>/npus/", views.node_npus, name="node-npus"),
    path("nodes/<int:pk>/discover/", views.node_discover_action, name="node-discover"),
    path("nodes/<int:pk>/host-key/", views.node_host_key, name="node-host-key"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/<int:pk>/", views.job_detail, name="job"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_action, name="job-cancel"),
    path("inventory/import/", views.inventory_import_page, name="inventory-import"),
    path("inventory/export/", views.inventory_export_download, name="inventory-export"),
    path("audit/", views.audit_list, name="audit"),
]
