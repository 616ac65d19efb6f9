"""What the executor needs to reach one node, as plain values (never a model): SshTarget."""

from __future__ import annotations

import io
from dataclasses import dataclass

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from .errors import SshTargetInvalid
from .hostkeys import host_key_fingerprint

__all__ = ["SshTarget", "load_private_key"]


@dataclass(frozen=True, repr=False)
class SshTarget:
    name: str
    address: str
    port: int
    username: str
    private_key: str | None  # OpenSSH or PEM text: ed25519, ecdsa or rsa; unencrypted
    password: str | None
    host_key: str  # "<type> <base64>"; required: an unknown host is never accepted

    def __post_init__(self):
        if not (0 < int(self.port) < 65536):
            raise SshTargetInvalid(f"{self.name}: port {self.port} is out of range")
        if not self.private_key and not self.password:
            raise SshTargetInvalid(f"{self.name}: needs a private key or a password")
        if not self.host_key:
            raise SshTargetInvalid(f"{self.name}: no pinned host key; trust the host explicitly first")
        host_key_fingerprint(self.host_key)  # validates the text now, not at connect time

    @property
    def auth_method(self) -> str:
        return "publickey" if self.private_key else "password"

    def __repr__(self) -> str:
        # Secrets stay out of logs, tracebacks and Celery task reprs.
        return (f"SshTarget(name={self.name!r}, address={self.address!r}, port={self.port}, "
                f"username={self.username!r}, auth={self.auth_method}, "
                f"host_key={host_key_fingerprint(self.host_key)})")

    __str__ = __repr__


def load_private_key(text: str) -> paramiko.PKey:
    """A paramiko key from OpenSSH or PEM text; the error never quotes the key."""
    data = text.encode()
    try:
        try:
            loaded = serialization.load_ssh_private_key(data, password=None)
        except ValueError:
            loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        kind = "encrypted (no passphrase support)" if "password" in str(exc).lower() else "not a readable key"
        raise SshTargetInvalid(f"private key is {kind}") from None
    if isinstance(loaded, ed25519.Ed25519PrivateKey):
        cls = paramiko.Ed25519Key
    elif isinstance(loaded, ec.EllipticCurvePrivateKey):
        cls = paramiko.ECDSAKey
    elif isinstance(loaded, rsa.RSAPrivateKey):
        cls = paramiko.RSAKey
    else:
        raise SshTargetInvalid(f"private key type {type(loaded).__name__} is not supported")
    try:
        return cls.from_private_key(io.StringIO(text))
    except (paramiko.SSHException, ValueError) as exc:
        raise SshTargetInvalid(f"private key could not be loaded by paramiko: {type(exc).__name__}") from None
