"""The password backend with the brute-force limit of apps/accounts/login_throttle.py in front of it.

Every password login goes through django.contrib.auth.authenticate(), so this one place covers the login page,
the admin's login page and the API token endpoint alike."""

from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied

from .login_throttle import client_ip, failure_record, lockout_remaining, success_record


class ThrottledModelBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None:
            return super().authenticate(request, username=username, password=password, **kwargs)
        ip = client_ip(request)
        if lockout_remaining(username, ip):
            raise PermissionDenied("locked out")  # authenticate() stops here: no other backend is tried
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            failure_record(username, ip)
        else:
            success_record(username, ip)
        return user
