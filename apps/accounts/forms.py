"""Login forms that say so when the brute-force limit refused the attempt (apps/accounts/login_throttle.py)."""

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from .login_throttle import client_ip, lockout_message, lockout_remaining


class LockoutMessageMixin:
    locked_out_message = ""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            wait = lockout_remaining(self.cleaned_data.get("username") or "", client_ip(self.request))
            if not wait:
                raise
            self.locked_out_message = lockout_message(wait)
            raise ValidationError(self.locked_out_message, code="locked_out") from None


class ThrottledAuthenticationForm(LockoutMessageMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(LockoutMessageMixin, AdminAuthenticationForm):
    pass
