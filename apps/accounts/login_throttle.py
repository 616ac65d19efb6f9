"""Brute-force limit on password logins (/login/, /admin/login/, /api/auth/token/), kept in Django's cache (Redis).

Failures are counted per user name and client address, and per client address alone (a larger cap, against one
address trying many names). Reaching a limit locks that pair (or address) out for the window; a locked-out
attempt is refused even with the right password, and is not checked against the password at all. A success
clears the user name's count for that address. The client address is REMOTE_ADDR: a forwarded header would let
the client pick its own.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)
now = time.time  # tests move the clock


def client_ip(request) -> str:
    return (getattr(request, "META", None) or {}).get("REMOTE_ADDR") or "unknown"


def _keys(username: str, ip: str) -> tuple[str, str]:
    name = hashlib.sha256((username or "").strip().lower().encode()).hexdigest()[:32]
    return f"login-throttle:user:{name}:{ip}", f"login-throttle:ip:{ip}"


def _window() -> int:
    return max(1, int(settings.LOGIN_LOCKOUT_MINUTES * 60))


def lockout_remaining(username: str, ip: str) -> int:
    """Seconds until this user name may try again from this address; 0 when it may now."""
    until = [cache.get(f"{key}:locked") for key in _keys(username, ip)]
    left = max((u - now() for u in until if u), default=0)
    return math.ceil(left) if left > 0 else 0


def lockout_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return f"Too many failed attempts: try again in {minutes} minute{'s' if minutes != 1 else ''}."


def failure_record(username: str, ip: str) -> None:
    pair, address = _keys(username, ip)
    for key, limit in ((pair, settings.LOGIN_MAX_FAILURES), (address, settings.LOGIN_MAX_FAILURES_PER_IP)):
        if limit and _bump(key) >= limit:
            cache.set(f"{key}:locked", now() + _window(), timeout=_window())
            cache.delete(key)  # after the lockout, a fresh count
            logger.warning("login locked out for %d minutes after %d failed attempts: %s from %s",
                           settings.LOGIN_LOCKOUT_MINUTES, limit,
                           f"user {username!r}" if key == pair else "every user", ip)


def success_record(username: str, ip: str) -> None:
    cache.delete(_keys(username, ip)[0])


def _bump(key: str) -> int:
    cache.add(key, 0, timeout=_window())
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=_window())
        return 1
