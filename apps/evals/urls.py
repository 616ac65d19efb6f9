from django.urls import path

from . import advisor_views, import_views, views

app_name = "evals"

urlpatterns = [
    path("", views.eval_list, name="list"),
    path("new/", views.eval_new, name="new"),
    path("compare/", views.eval_compare, name="compare"),
    path("import/", import_views.eval_import_page, name="import"),
    path("advisor/", advisor_views.advisor_page, name="advisor"),
    path("<int:pk>/", views.eval_detail, name="detail"),
    path("<int:pk>/state/", views.eval_state, name="state"),
    path("<int:pk>/cancel/", views.eval_cancel_action, name="cancel"),
    path("<int:pk>/resume/", views.eval_resume_action, name="resume"),
    path("<int:pk>/download/", views.eval_download, name="download"),
    path("sweeps/", views.sweep_list, name="sweeps"),
    path("sweeps/new/", views.sweep_new, name="sweep-new"),
    path("sweeps/<int:pk>/", views.sweep_detail, name="sweep"),
    path("datasets/", views.dataset_list, name="datasets"),
    path("datasets/upload/", views.dataset_upload, name="dataset-upload"),
]
