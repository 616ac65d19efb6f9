"""Parses PDCP_SECRETS_KEY (one or more comma-separated Fernet keys) at start-up; no Django model imports, so
controlplane/settings.py can call it and a malformed key stops start-up there, naming the setting."""

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

MAKE_ONE = "python -c \"from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())\""


class SecretsKeyInvalid(ImproperlyConfigured):
    pass


def parse_fernet_keys(text: str, *, source: str = "PDCP_SECRETS_KEY") -> tuple[str, ...]:
    """The keys in order (the first encrypts, every one decrypts). The message names the source and the key's
    position, never the key itself: error output ends up in logs."""
    if not text.strip():
        return ()
    keys = [part.strip() for part in text.split(",") if part.strip()]
    if not keys:
        raise SecretsKeyInvalid(f"{source} holds only commas: give one Fernet key, or several separated by commas")
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            where = f"key {position} of {len(keys)}" if len(keys) > 1 else "the key"
            raise SecretsKeyInvalid(
                f"{source}: {where} is not a valid Fernet key (32 url-safe base64-encoded bytes, 44 characters); "
                f"make one with {MAKE_ONE}") from None
    return tuple(keys)
