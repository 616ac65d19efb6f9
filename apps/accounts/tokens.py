"""API tokens that expire: PDCP_TOKEN_TTL_HOURS after they were made (0 = never)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from rest_framework.authtoken.models import Token


def token_expires(token: Token) -> datetime | None:
    hours = settings.API_TOKEN_TTL_HOURS
    return token.created + timedelta(hours=hours) if hours > 0 else None


def token_expired(token: Token, *, at: datetime) -> bool:
    expires = token_expires(token)
    return expires is not None and expires <= at


def token_issue(user, *, rotate: bool, at: datetime) -> Token:
    """The user's token: the current one unless rotating or it has expired, else a new one (the old one dies)."""
    token = Token.objects.filter(user=user).first()
    if token is not None and not rotate and not token_expired(token, at=at):
        return token
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)
