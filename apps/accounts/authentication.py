"""DRF token authentication that refuses expired tokens (apps/accounts/tokens.py) with a 401 saying so."""

from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from .tokens import token_expired, token_expires


class ExpiringTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        if token_expired(token, at=timezone.now()):
            raise AuthenticationFailed(
                f"API token expired at {token_expires(token).isoformat()}: get a new one with POST /api/auth/token/ "
                "(user name and password)")
        return user, token
