"""Bring a remote directory tree home over SFTP, bounded in size, refusing anything but plain files and dirs."""

from __future__ import annotations

import posixpath
import stat
from pathlib import Path

import paramiko

from .connection import SshConnection
from .errors import SshTransferFailed


def download_tree(conn: SshConnection, remote_dir: str, local_dir: Path, *, max_bytes: int = 512 << 20,
                  skip_dirs: tuple[str, ...] = ()) -> int:
    """Copy remote_dir into local_dir (created); returns the bytes copied.

    Symbolic links and special files are skipped (a link could point anywhere on the host); directories named in
    skip_dirs are not entered; more than max_bytes in all is an error, leaving what was copied so far.
    """
    total = 0
    try:
        sftp = conn.open_sftp()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise SshTransferFailed(conn.target.name, remote_dir, f"no SFTP: {exc}") from None
    try:
        stack = [(remote_dir, local_dir)]
        while stack:
            remote, local = stack.pop()
            local.mkdir(parents=True, exist_ok=True)
            for entry in sftp.listdir_attr(remote):
                source = posixpath.join(remote, entry.filename)
                if stat.S_ISDIR(entry.st_mode):
                    if entry.filename not in skip_dirs:
                        stack.append((source, local / entry.filename))
                elif stat.S_ISREG(entry.st_mode):
                    total += entry.st_size or 0
                    if total > max_bytes:
                        raise SshTransferFailed(conn.target.name, remote_dir, f"more than {max_bytes} bytes")
                    sftp.get(source, str(local / entry.filename))
    except (OSError, paramiko.SSHException) as exc:
        raise SshTransferFailed(conn.target.name, remote_dir, str(exc) or type(exc).__name__) from None
    finally:
        sftp.close()
    return total
