"""SECURE_PROXY_SSL_HEADER from the environment (docs/configuration.md): the header by which the TLS-terminating
proxy says a request came over HTTPS. A malformed value stops start-up, naming the variable."""

import re

from .env import MissingSetting

_HEADER = re.compile(r"([A-Za-z0-9-]+)\s*[:=]\s*(\S+)")
_OFF = ("", "none", "off", "false", "0")


def proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """'X-Forwarded-Proto: https' -> ('HTTP_X_FORWARDED_PROTO', 'https'), as SECURE_PROXY_SSL_HEADER wants;
    'none' trusts no header."""
    if value.strip().lower() in _OFF:
        return None
    match = _HEADER.fullmatch(value.strip())
    if not match:
        raise MissingSetting(f"SECURE_PROXY_SSL_HEADER must look like 'X-Forwarded-Proto: https' (header: value) "
                             f"or 'none', got {value!r}")
    header, expected = match.groups()
    return "HTTP_" + header.upper().replace("-", "_"), expected
