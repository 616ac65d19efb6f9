"""Start and stop one real OpenSSH server that plays a simulated node (needs root).

Small API other parts' tests use directly:

    from simcluster.sshnode import (ensure_login_user, generate_client_key,
                                    start_ssh_node, stop_ssh_node)

    ensure_login_user()                                   # creates `simnode` (/bin/sh) once
    priv_text, pub_line = generate_client_key(tmp / "id_ed25519")
    node = start_ssh_node("node0", "127.0.10.150", 22, tmp / "node0", pub_line,
                          bin_dir=None, env={"EXTRA": "1"})
    node.host_key_line   # "ssh-ed25519 AAAA..."  -> pin it (RejectPolicy)
    node.known_hosts_line  # "127.0.10.150 ssh-ed25519 AAAA..." ("[addr]:port ..." off port 22)
    ...paramiko connect to node.address:node.port as node.user with the private key...
    stop_ssh_node(node)  # kills the daemon by PID and waits until it is gone

What a session on the node sees (sshd_config `SetEnv`, applied after sshd's own PATH, so it
overrides it - tested; all pairs go on ONE SetEnv line because sshd ignores every SetEnv after
the first; the login shell is /bin/sh, which reads no profile for `ssh host cmd`):
`PATH=<bin_dir>:/usr/local/bin:/usr/bin:/bin`, `SIMCLUSTER_NODE=<name>`,
`SIMCLUSTER_NODE_DIR=<state_dir>`, plus `env`. The state dir is owned by the login user so
processes started over SSH can write their pid files and registrations there.

Traps handled here (docs/ssh-execution.md): /run/sshd must exist; `useradd` locks the account, and
with `UsePAM no` a locked account fails even key auth, so the password field is set to `*`;
authorized_keys lives outside the user's home, hence `StrictModes no` and mode 644, and sshd
reads it as the login user, so every parent of state_dir must be searchable by others (pytest's
tmp_path is below a 0700 dir: use a 0755 root of your own; start_ssh_node raises otherwise).
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
LOGIN_USER = "simnode"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass
class RunningSshNode:
    name: str
    address: str
    port: int
    user: str
    pid: int
    host_key_line: str  # "<type> <base64>", what the inventory pins
    state_dir: Path
    config_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def known_hosts_line(self) -> str:
        host = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{host} {self.host_key_line}"


def ensure_login_user(user: str = LOGIN_USER) -> str:
    """Create the unprivileged login user (shell /bin/sh) if missing; safe to call concurrently."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        # Exit code 9 = "already exists": another test process won the race, which is fine.
        rc = subprocess.run(["useradd", "-m", "-s", "/bin/sh", user], capture_output=True).returncode
        if rc not in (0, 9):
            raise RuntimeError(f"useradd {user} failed with exit code {rc}") from None
    # A locked account ("!") is refused by sshd even for key auth when PAM is off.
    subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
    return user


def generate_client_key(path: str | os.PathLike) -> tuple[str, str]:
    """Write an Ed25519 key pair at path (and path.pub); return (private key text, public line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "simcluster", "-f", str(path)],
                       check=True, capture_output=True)
    pub = Path(f"{path}.pub").read_text().split()
    return path.read_text(), f"{pub[0]} {pub[1]}"


def _host_key(state_dir: Path) -> tuple[Path, str]:
    key = state_dir / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)],
                       check=True, capture_output=True)
    pub = Path(f"{key}.pub").read_text().split()
    return key, f"{pub[0]} {pub[1]}"


def _sshd_config(*, address: str, port: int, state_dir: Path, host_key: Path, user: str,
                 env: dict[str, str], sftp: bool = True) -> str:
    lines = [
        f"ListenAddress {address}:{port}",
        f"HostKey {host_key}",
        f"PidFile {state_dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {state_dir / 'authorized_keys'}",
        f"AllowUsers {user}",
        "PermitRootLogin no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        "ClientAliveInterval 15",
    ]
    if sftp:  # as Debian's own sshd_config: AISBench output folders come home over SFTP
        lines.append("Subsystem sftp internal-sftp")
    # SetEnv values may be quoted; our values never contain quotes or spaces we did not put there.
    # One SetEnv line: sshd keeps only the first SetEnv directive it reads.
    pairs = []
    for key, value in sorted(env.items()):
        if '"' in value or "\n" in value:
            raise ValueError(f"env value for {key} may not contain quotes or newlines")
        pairs.append(f'{key}="{value}"')
    if pairs:
        lines.append("SetEnv " + " ".join(pairs))
    return "\n".join(lines) + "\n"


def _wait_for_pidfile(pidfile: Path, log: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            time.sleep(0.01)
    tail = log.read_text()[-2000:] if log.exists() else ""
    raise RuntimeError(f"sshd did not write {pidfile} within {timeout}s: {tail}")


def start_ssh_node(name: str, address: str, port: int, state_dir: str | os.PathLike,
                   client_public_key: str, bin_dir: str | os.PathLike | None = None,
                   env: dict[str, str] | None = None, user: str = LOGIN_USER,
                   timeout: float = 5.0, sftp: bool = True) -> RunningSshNode:
    """Start a daemonized sshd on address:port for `name`; returns once it accepts connections."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    _check_traversable(state_dir)
    ensure_login_user(user)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    host_key, host_key_line = _host_key(state_dir)
    auth = state_dir / "authorized_keys"
    auth.write_text(client_public_key.strip() + "\n")
    auth.chmod(0o644)
    pw = pwd.getpwnam(user)
    # The login user writes pid files, logs and engine registrations below its node dir.
    os.chown(state_dir, pw.pw_uid, pw.pw_gid)
    state_dir.chmod(0o755)
    session_env = {"SIMCLUSTER_NODE": name, "SIMCLUSTER_NODE_DIR": str(state_dir)}
    session_env["PATH"] = f"{Path(bin_dir).resolve()}:{BASE_PATH}" if bin_dir else BASE_PATH
    session_env.update(env or {})
    config = state_dir / "sshd_config"
    config.write_text(_sshd_config(address=address, port=port, state_dir=state_dir,
                                   host_key=host_key, user=user, env=session_env, sftp=sftp))
    pidfile, log = state_dir / "sshd.pid", state_dir / "sshd.log"
    pidfile.unlink(missing_ok=True)
    check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"sshd config rejected: {check.stderr.strip()}")
    # Without -D sshd daemonizes: the listener outlives `simcluster up`, and its PID is in pidfile.
    subprocess.run([SSHD, "-f", str(config), "-E", str(log)], check=True, timeout=timeout)
    pid = _wait_for_pidfile(pidfile, log, timeout)
    _wait_listening(address, port, timeout)
    return RunningSshNode(name=name, address=address, port=port, user=user, pid=pid,
                          host_key_line=host_key_line, state_dir=state_dir, config_path=config,
                          env=session_env)


def _check_traversable(state_dir: Path) -> None:
    # sshd reads authorized_keys as the login user: every parent must be searchable by others
    # (pytest's tmp_path lives under a 0700 dir, so tests use a 0755 root of their own).
    for parent in state_dir.parents:
        if not parent.stat().st_mode & 0o001:
            raise ValueError(f"{parent} is not searchable by other users; pick a state dir below a 0755 path")


def _wait_listening(address: str, port: int, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=0.5) as sock:
                sock.recv(4)  # the SSH banner proves sshd, not something else, answers
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {address}:{port} is not accepting connections") from None
            time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    """True if pid runs and is not a zombie (`kill -0` succeeds on zombies)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_ssh_node(node: RunningSshNode, timeout: float = 5.0) -> None:
    """Stop the listener by PID. Open sessions end with their connections."""
    try:
        os.kill(node.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(node.pid):
        if time.monotonic() > deadline:
            os.kill(node.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.02)
