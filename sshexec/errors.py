"""Typed, human SSH errors: each says which node, which address and what went wrong, never a secret."""

import socket


class SshError(Exception):
    """Base of every error the SSH executor raises."""


class SshTargetInvalid(SshError, ValueError):
    """A target or launch spec that cannot be used as given (bad host key text, key, port, env name)."""


class SshUnreachable(SshError):
    """No SSH conversation could be started: refused, timed out, no route, or no SSH banner."""

    def __init__(self, name: str, address: str, port: int, cause: str):
        self.name, self.address, self.port, self.cause = name, address, port, cause
        super().__init__(f"{name} ({address}:{port}) unreachable: {cause}")


class SshAuthFailed(SshError):
    def __init__(self, name: str, address: str, port: int, username: str, method: str, detail: str = ""):
        self.name, self.username, self.method = name, username, method
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{name} ({address}:{port}) refused {method} authentication for user {username!r}{extra}")


class SshHostKeyMismatch(SshError):
    def __init__(self, name: str, address: str, port: int, expected: str, presented: str):
        self.name, self.expected, self.presented = name, expected, presented
        super().__init__(f"host key for {name} ({address}:{port}) changed: expected {expected}, got {presented}")


class SshCommandTimeout(SshError):
    """The command did not finish in time. The remote process is abandoned, not killed."""

    def __init__(self, name: str, command: str, timeout: float, stdout: str = "", stderr: str = ""):
        self.name, self.command, self.timeout = name, command, timeout
        self.stdout, self.stderr = stdout, stderr
        shown = command if len(command) <= 80 else command[:77] + "..."
        super().__init__(f"command on {name} did not finish within {timeout:g}s: {shown}")


class SshConnectionLost(SshError):
    """The connection dropped while a command ran; its outcome is unknown, so it is not retried."""

    def __init__(self, name: str, command: str, cause: str):
        self.name, self.command = name, command
        super().__init__(f"connection to {name} lost while running a command ({cause}); outcome unknown")


class SshTransferFailed(SshError):
    def __init__(self, name: str, path: str, cause: str):
        self.name, self.path = name, path
        super().__init__(f"could not write {path} on {name}: {cause}")


def describe_socket_error(exc: OSError, timeout: float) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"TCP connect timed out after {timeout:g}s"
    return exc.strerror or str(exc) or type(exc).__name__
