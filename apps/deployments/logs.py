"""Reading a process's log over SSH for the UI and the API (a read: viewers may do it)."""

from apps.inventory.ssh_targets import NodeNotReady, ssh_target_for
from sshexec import SshConnection, SshError, tail_command

from .models import Process

MAX_LINES = 2000


class LogUnavailable(Exception):
    pass


def process_log_tail(process: Process, *, lines: int = 200) -> str:
    lines = max(1, min(int(lines), MAX_LINES))
    if process.node is None:
        raise LogUnavailable(f"node {process.node_name} is no longer in the inventory")
    try:
        target = ssh_target_for(process.node)
    except NodeNotReady as exc:
        raise LogUnavailable(str(exc)) from None
    try:
        with SshConnection(target, connect_timeout=5, connect_retries=0) as conn:
            result = conn.run(tail_command(process.log_path, lines), timeout=10)
    except SshError as exc:
        raise LogUnavailable(str(exc)) from None
    if not result.ok:
        raise LogUnavailable(f"cannot read {process.log_path} on {process.node_name}: "
                             f"{result.stderr.strip() or f'exit {result.exit_status}'}")
    return result.stdout
