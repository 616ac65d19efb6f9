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
    path("overview/", views.overview, name="overview"),
]
