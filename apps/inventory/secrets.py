"""Encryption at rest for secrets (Fernet: AES-128-CBC + HMAC), keyed from PDCP_SECRETS_KEY.

PDCP_SECRETS_KEY may hold several comma-separated keys: the first encrypts, every one decrypts, so a new key can
be put first while `manage.py rotate_secrets` re-encrypts what the old one wrote. A stored value no key opens
loads as an UndecryptableSecret (a visible state on its object), never as an exception on every page that
touches the row.
"""

import os
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.signals import setting_changed
from django.db import models
from django.dispatch import receiver

from .secret_keys import parse_fernet_keys

UNDECRYPTABLE = "secret cannot be decrypted with the current PDCP_SECRETS_KEY: re-enter it or add the old key"


class SecretKeyError(RuntimeError):
    pass


class UndecryptableSecret:
    """A stored token that no configured key opens. Saving its row writes the token back unchanged; it is not a
    str, so it cannot be sent anywhere as the secret by mistake."""

    __slots__ = ("token",)

    def __init__(self, token: str):
        self.token = token

    def __eq__(self, other):
        return isinstance(other, UndecryptableSecret) and other.token == self.token

    def __hash__(self):
        return hash(self.token)

    def __str__(self):
        return "(undecryptable secret)"

    __repr__ = __str__


def is_undecryptable(value) -> bool:
    return isinstance(value, UndecryptableSecret)


@lru_cache(maxsize=1)
def _fernet() -> MultiFernet:
    keys = settings.SECRETS_KEYS
    if not keys:
        # Development only (production refuses to start without PDCP_SECRETS_KEY): a key kept beside the data.
        path = settings.SECRETS_KEY_FILE
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(Fernet.generate_key())
        keys = parse_fernet_keys(path.read_text(), source=str(path))
    return MultiFernet([Fernet(key) for key in keys])


@receiver(setting_changed)
def _forget_keys(setting, **kwargs):
    if setting in ("SECRETS_KEYS", "SECRETS_KEY_FILE"):
        _fernet.cache_clear()


def encrypt(text: str) -> str:
    return _fernet().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretKeyError(f"a stored {UNDECRYPTABLE}") from exc


class EncryptedTextField(models.TextField):
    """Stores Fernet tokens; Python code sees plain text, or an UndecryptableSecret. Empty stays empty."""

    def from_db_value(self, value, expression, connection):
        if not value:
            return value
        try:
            return decrypt(value)
        except SecretKeyError:
            return UndecryptableSecret(value)

    def to_python(self, value):
        return value if isinstance(value, UndecryptableSecret) else super().to_python(value)

    def get_prep_value(self, value):
        if isinstance(value, UndecryptableSecret):
            return value.token
        value = super().get_prep_value(value)
        return encrypt(value) if value else value
