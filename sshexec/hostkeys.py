"""Pinned host keys: parse "<type> <base64>", fingerprint it as OpenSSH does, fetch it for first trust."""

from __future__ import annotations

import base64
import binascii
import hashlib
import socket
import struct

import paramiko

from .errors import SshTargetInvalid, SshUnreachable, describe_socket_error

__all__ = ["fetch_host_key", "host_key_fingerprint", "parse_host_key"]


def _split(host_key: str) -> tuple[str, bytes]:
    parts = host_key.split()
    if len(parts) < 2:
        raise SshTargetInvalid(f"host key must be '<type> <base64>', got {host_key!r}")
    key_type, b64 = parts[0], parts[1]
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise SshTargetInvalid(f"host key of type {key_type} is not valid base64") from None
    # The blob starts with its own type name; a mismatch means a pasted or truncated key.
    if len(blob) < 4:
        raise SshTargetInvalid(f"host key of type {key_type} is truncated")
    (n,) = struct.unpack(">I", blob[:4])
    if blob[4:4 + n] != key_type.encode():
        raise SshTargetInvalid(f"host key says {key_type} but its data is {blob[4:4 + n][:40]!r}")
    return key_type, blob


def host_key_fingerprint(host_key: str) -> str:
    """"SHA256:..." exactly as `ssh-keygen -lf` prints it (unpadded base64 of the blob's SHA-256)."""
    _, blob = _split(host_key)
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def parse_host_key(host_key: str) -> paramiko.PKey:
    key_type, blob = _split(host_key)
    try:
        return paramiko.PKey.from_type_string(key_type, blob)
    except (paramiko.SSHException, ValueError) as exc:
        raise SshTargetInvalid(f"unsupported host key type {key_type}: {exc}") from None


def fetch_host_key(address: str, port: int = 22, timeout: float = 5.0) -> str:
    """The key a server presents, as "<type> <base64>", for the explicit "trust this host" action.

    Nothing is authenticated and nothing is trusted here: the caller shows the fingerprint to an
    operator, who decides.
    """
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError as exc:
        raise SshUnreachable(address, address, port, describe_socket_error(exc, timeout)) from None
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = timeout
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return f"{key.get_name()} {key.get_base64()}"
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise SshUnreachable(address, address, port, f"no SSH handshake: {exc or type(exc).__name__}") from None
    finally:
        transport.close()

