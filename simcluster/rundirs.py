"""Private run dirs for deployments onto the simulated cluster: below the login user's home, never below /tmp.

The detached start (sshexec/process_commands.py) refuses a run dir when any directory on its path is writable by
group or others, as /tmp and /var/tmp are, so the tests, the bench and the demo put their run dirs under
`<home of simnode>/pdcp-runs` (mode 0700, owned by simnode). All simulated nodes share this machine's disk, so one
directory serves every node. Needs root (it creates the user and chowns).
"""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

from .sshnode import LOGIN_USER, ensure_login_user


def private_run_root(user: str = LOGIN_USER) -> Path:
    """<home>/pdcp-runs, owned by user, mode 0700; the home itself is made not writable by group or others."""
    ensure_login_user(user)
    pw = pwd.getpwnam(user)
    home = Path(pw.pw_dir)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    mode = home.stat().st_mode & 0o7777
    if mode & 0o022:
        home.chmod(mode & ~0o022)
    root = home / "pdcp-runs"
    root.mkdir(mode=0o700, exist_ok=True)
    os.chown(root, pw.pw_uid, pw.pw_gid)
    root.chmod(0o700)
    return root


def new_run_dir(prefix: str = "run", user: str = LOGIN_USER) -> str:
    """A fresh path below private_run_root(); not created: the login user creates it over SSH."""
    return str(private_run_root(user) / f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}")
