from django.urls import path

from . import views
from .playground import views as playground_views

app_name = "deployments"

urlpatterns = [
    path("", views.deployment_list, name="list"),
    path("new/", views.deployment_new, name="new"),
    path("<int:pk>/", views.deployment_detail, name="detail"),
    path("<int:pk>/edit/", views.deployment_edit, name="edit"),
    path("<int:pk>/edit/form/", views.deployment_edit_form, name="edit-form"),
    path("<int:pk>/plan/", views.deployment_plan_page, name="plan"),
    path("<int:pk>/diff/", views.deployment_diff_page, name="diff"),
    path("<int:pk>/export/", views.deployment_export, name="export"),
    path("<int:pk>/revisions/<int:number>/activate/", views.deployment_activate, name="activate"),
    path("<int:pk>/playground/", playground_views.playground_page, name="playground"),
    path("<int:pk>/jobs/<slug:kind>/", views.deployment_job, name="job"),
    path("processes/<int:pk>/log/", views.process_log, name="process-log"),
]
