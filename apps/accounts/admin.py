"""The admin's login page shows the brute-force lockout like /login/ does."""

from django.contrib import admin

from .forms import ThrottledAdminAuthenticationForm

admin.site.login_form = ThrottledAdminAuthenticationForm
