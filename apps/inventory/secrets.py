"""Encryption at rest for SSH credentials (Fernet: AES-128-CBC + HMAC), keyed from PDCP_SECRETS_KEY."""

import os
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import models


class SecretKeyError(RuntimeError):
    pass


@lru_cache(maxsize=1)
def _fernet() -> Fernet:
    key = settings.SECRETS_KEY
    if not key:
        # Development only (production refuses to start without PDCP_SECRETS_KEY): a key kept beside the data.
        path = settings.SECRETS_KEY_FILE
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(Fernet.generate_key())
        key = path.read_bytes().strip()
    try:
        return Fernet(key)
    except (ValueError, TypeError) as exc:
        raise SecretKeyError("PDCP_SECRETS_KEY is not a valid Fernet key (32 url-safe base64-encoded bytes)") from exc


def encrypt(text: str) -> str:
    return _fernet().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretKeyError("a stored secret cannot be decrypted: PDCP_SECRETS_KEY changed since it was saved") from exc


class EncryptedTextField(models.TextField):
    """Stores Fernet tokens; Python code sees plain text. Empty stays empty."""

    def from_db_value(self, value, expression, connection):
        return decrypt(value) if value else value

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return encrypt(value) if value else value
