"""One persistent, host-key-pinned paramiko connection per node; one raw channel per command.

Why it looks like this (measured: docs/ssh-execution.md):
- raw `transport.open_session()` channels: `SSHClient.exec_command` from several threads makes OpenSSH
  drop the whole connection (a late EOF from exec_command's stdin file);
- TCP_NODELAY: without it every command stalls ~40 ms on Nagle/delayed ACK;
- the host key comes only from the target (RejectPolicy, no known_hosts, no agent, no ~/.ssh keys);
- a connection never crosses a fork: a Celery prefork child reopens lazily instead of sharing the
  parent's socket (two processes writing one SSH stream corrupt it for both).
"""

from __future__ import annotations

import os
import posixpath
import select
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from .connection_stats import connection_changed
from .errors import (
    SshAuthFailed,
    SshCommandTimeout,
    SshConnectionLost,
    SshError,
    SshHostKeyMismatch,
    SshTransferFailed,
    SshUnreachable,
    describe_socket_error,
)
from .hostkeys import host_key_fingerprint, parse_host_key
from .target import SshTarget, load_private_key

__all__ = ["CommandResult", "OutputCallback", "SshConnection"]

# on_output(stream, line): stream is "stdout" or "stderr", line has no trailing newline.
OutputCallback = Callable[[str, str], None]

# OpenSSH's default MaxSessions is 10 channels per connection; stay below it on real nodes.
DEFAULT_MAX_SESSIONS = 8


@dataclass(frozen=True)
class CommandResult:
    exit_status: int  # -1 when the remote process died without reporting one (e.g. by a signal)
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def command_missing(self) -> bool:
        """The shell could not find the program (POSIX exit 127; bash and dash word it differently)."""
        return self.exit_status == 127 or "command not found" in self.stderr or ": not found" in self.stderr


class _LineSplitter:
    """Turns arriving byte chunks into whole lines for the callback; keeps the full text too."""

    def __init__(self, stream: str, callback: OutputCallback | None):
        self.stream, self.callback = stream, callback
        self.chunks: list[bytes] = []
        self._partial = b""

    def feed(self, data: bytes) -> None:
        self.chunks.append(data)
        if self.callback is None:
            return
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self.callback(self.stream, line.decode("utf-8", "replace"))

    def finish(self) -> str:
        if self.callback is not None and self._partial:
            self.callback(self.stream, self._partial.decode("utf-8", "replace"))
            self._partial = b""
        return b"".join(self.chunks).decode("utf-8", "replace")


class SshConnection:
    """A lazily opened connection to one target; safe to share between threads (not processes)."""

    def __init__(self, target: SshTarget, *, connect_timeout: float = 10.0, connect_retries: int = 2,
                 retry_delay: float = 0.5, max_sessions: int = DEFAULT_MAX_SESSIONS):
        self.target = target
        self.connect_timeout = connect_timeout
        self.connect_retries = connect_retries
        self.retry_delay = retry_delay
        self.max_sessions = max_sessions
        self._host_key = parse_host_key(target.host_key)
        self._pkey = load_private_key(target.private_key) if target.private_key else None
        self._init_process_state()

    def _init_process_state(self) -> None:
        # Locks and the client belong to the process that made them; a forked child starts over.
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(self.max_sessions)
        self._client: paramiko.SSHClient | None = None
        self.connects = 0  # how many times this process connected; tests and metrics read it

    def __repr__(self) -> str:
        return f"SshConnection({self.target!r})"

    # --- connecting -------------------------------------------------------------------------------

    def _transport(self) -> paramiko.Transport:
        if self._pid != os.getpid():
            # Drop the parent's client without closing it: closing would send a disconnect
            # on the socket the parent still uses.
            self._init_process_state()
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                self._close_client()
                self._client = self._connect_with_retries()
                connection_changed(self)
                transport = self._client.get_transport()
            return transport

    def _connect_with_retries(self) -> paramiko.SSHClient:
        # Only unreachability is retried: a refused key or a changed host key will not get better.
        for attempt in range(self.connect_retries + 1):
            try:
                return self._connect_once()
            except SshUnreachable:
                if attempt == self.connect_retries:
                    raise
                time.sleep(self.retry_delay * (attempt + 1))
        raise AssertionError("unreachable")

    def _connect_once(self) -> paramiko.SSHClient:
        t = self.target
        try:
            sock = socket.create_connection((t.address, t.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise SshUnreachable(t.name, t.address, t.port, describe_socket_error(exc, self.connect_timeout)) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = paramiko.SSHClient()
        host_entry = t.address if t.port == 22 else f"[{t.address}]:{t.port}"
        client.get_host_keys().add(host_entry, self._host_key.get_name(), self._host_key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                t.address, port=t.port, username=t.username, sock=sock,
                pkey=self._pkey, password=None if self._pkey else t.password,
                look_for_keys=False, allow_agent=False, timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout, auth_timeout=self.connect_timeout,
                channel_timeout=self.connect_timeout,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            presented = f"{exc.key.get_name()} {exc.key.get_base64()}"
            raise SshHostKeyMismatch(t.name, t.address, t.port, host_key_fingerprint(t.host_key),
                                     host_key_fingerprint(presented)) from None
        except paramiko.BadAuthenticationType as exc:
            client.close()
            raise SshAuthFailed(t.name, t.address, t.port, t.username, t.auth_method,
                                f"server allows only: {', '.join(exc.allowed_types) or 'nothing'}") from None
        except paramiko.AuthenticationException:
            client.close()
            raise SshAuthFailed(t.name, t.address, t.port, t.username, t.auth_method) from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            transport = client.get_transport()
            client.close()
            cause = str(exc) or type(exc).__name__
            if transport is None or not transport.remote_version:
                # Something answers TCP but does not speak SSH (or is too overloaded to).
                cause = f"no SSH banner within {self.connect_timeout:g}s"
            raise SshUnreachable(t.name, t.address, t.port, cause) from None
        self.connects += 1
        return client

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            connection_changed()

    @property
    def is_open(self) -> bool:
        """Connected from this process and the transport still up (connection_stats counts these)."""
        if self._pid != os.getpid() or self._client is None:
            return False
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()

    def connect(self) -> None:
        """Open the connection now (otherwise the first command does)."""
        self._transport()

    def close(self) -> None:
        if self._pid != os.getpid():
            self._init_process_state()
            return
        with self._lock:
            self._close_client()

    def __enter__(self) -> SshConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- commands ---------------------------------------------------------------------------------

    def _open_channel(self) -> paramiko.Channel:
        """A session channel, reconnecting once if the transport turns out to be dead, and asking once more when
        a live one did not answer in time (sshd on a machine too loaded to fork the session: a CI run lost a deploy
        to one such timeout).

        Safe to retry: nothing has been sent to the remote shell yet.
        """
        for attempt in (1, 2):
            transport = self._transport()
            try:
                return transport.open_session(timeout=self.connect_timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                timed_out = str(exc).startswith("Timeout opening channel")
                if attempt == 2 or (transport.is_active() and not timed_out):
                    raise SshError(f"{self.target.name}: could not open a channel: {exc}") from None
        raise AssertionError("unreachable")

    def run(self, command: str, timeout: float = 300.0, on_output: OutputCallback | None = None,
            stdin: bytes | None = None) -> CommandResult:
        """Run `command` with the login shell; stream its output line by line to `on_output`.

        Never retried: a command may have had effects even when its connection dropped.
        """
        with self._sessions:
            started = time.monotonic()
            channel = self._open_channel()
            try:
                return self._run_on(channel, command, timeout, on_output, started, stdin)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise SshConnectionLost(self.target.name, command, str(exc) or type(exc).__name__) from None
            finally:
                channel.close()

    def _run_on(self, channel: paramiko.Channel, command: str, timeout: float,
                on_output: OutputCallback | None, started: float, stdin: bytes | None) -> CommandResult:
        out, err = _LineSplitter("stdout", on_output), _LineSplitter("stderr", on_output)
        deadline = started + timeout
        if stdin is None:
            # The shell itself gives the command EOF on stdin. Sending a channel EOF instead races
            # with the server closing a fast command's channel: paramiko can put our EOF on the wire
            # after its own CLOSE, and OpenSSH then drops the whole connection ("ieof packet
            # referred to nonexistent channel"), seen here with 16 threads on one connection.
            channel.exec_command(f"exec </dev/null\n{command}")
        else:
            channel.exec_command(command)
            channel.settimeout(timeout)
            channel.sendall(stdin)
            channel.shutdown_write()  # the command is still reading, so it cannot have closed yet
        # fileno() is a pipe paramiko signals when stdout or stderr data (or EOF) arrives.
        fd = channel.fileno()
        while True:
            while channel.recv_ready():
                out.feed(channel.recv(65536))
            while channel.recv_stderr_ready():
                err.feed(channel.recv_stderr(65536))
            if (channel.eof_received or channel.closed) and not (channel.recv_ready() or channel.recv_stderr_ready()):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SshCommandTimeout(self.target.name, command, timeout, out.finish(), err.finish())
            select.select([fd], [], [], min(remaining, 1.0))
        remaining = max(deadline - time.monotonic(), 0.0)
        if not channel.status_event.wait(remaining):
            raise SshCommandTimeout(self.target.name, command, timeout, out.finish(), err.finish())
        stdout, stderr = out.finish(), err.finish()
        transport = channel.get_transport()
        if channel.exit_status == -1 and (transport is None or not transport.is_active()):
            raise SshConnectionLost(self.target.name, command, "transport closed")
        return CommandResult(channel.exit_status, stdout, stderr, time.monotonic() - started)

    # --- files ------------------------------------------------------------------------------------

    def open_sftp(self) -> paramiko.SFTPClient:
        """An SFTP client on this connection's transport; the caller closes it (sshexec/transfer.py)."""
        return paramiko.SFTPClient.from_transport(self._transport())

    def put_text(self, path: str, text: str, mode: int = 0o644) -> None:
        """Write a (config) file atomically: a temporary file beside it, then a rename.

        A process reading the file (or a half-failed upload) never sees half of it. Uses SFTP;
        where the server has no sftp subsystem (OpenSSH has none unless configured), the same
        steps run as `cat` + `chmod` + `mv` over a command channel.
        """
        tmp = posixpath.join(posixpath.dirname(path) or ".", f".{posixpath.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
        data = text.encode()
        with self._sessions:
            try:
                sftp = paramiko.SFTPClient.from_transport(self._transport())
            except (paramiko.SSHException, EOFError, OSError):
                sftp = None
            if sftp is not None:
                self._put_sftp(sftp, path, tmp, data, mode)
                return
        q = shlex.quote
        result = self.run(f"umask 077; cat > {q(tmp)} && chmod {mode:o} {q(tmp)} && mv -f -- {q(tmp)} {q(path)}"
                          f" || {{ rm -f -- {q(tmp)}; exit 1; }}", timeout=self.connect_timeout + len(data) / 1e6,
                          stdin=data)
        if not result.ok:
            raise SshTransferFailed(self.target.name, path, result.stderr.strip() or f"exit {result.exit_status}")

    def _put_sftp(self, sftp: paramiko.SFTPClient, path: str, tmp: str, data: bytes, mode: int) -> None:
        try:
            sftp.get_channel().settimeout(self.connect_timeout + len(data) / 1e6 + 30)
            # Create it empty and owner-only, set its mode, then write: a secret is never readable by others.
            with sftp.open(tmp, "wb") as fh:
                sftp.chmod(tmp, mode)
                fh.write(data)
            sftp.posix_rename(tmp, path)
        except (OSError, paramiko.SSHException) as exc:
            try:
                sftp.remove(tmp)
            except (OSError, paramiko.SSHException):
                pass
            raise SshTransferFailed(self.target.name, path, str(exc) or type(exc).__name__) from None
        finally:
            sftp.close()
