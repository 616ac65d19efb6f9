"""Reading a process's log over SSH for the UI and the API (a read: viewers may do it)."""

from apps.inventory.models import Node
from apps.inventory.ssh_targets import NodeNotReady, ssh_target_for
from sshexec import SshConnection, SshError, mindie_commands, tail_command

from .models import Process

MAX_LINES = 2000


class LogUnavailable(Exception):
    pass


def process_log_tail(process: Process, *, lines: int = 200) -> str:
    """The log file's last lines on the process's node; a MindIE pod's from `kubectl logs` on its deploy host."""
    lines = max(1, min(int(lines), MAX_LINES))
    pod = mindie_commands.split_pod_log_path(process.log_path)
    if pod:
        host, namespace, name = pod
        node = Node.objects.filter(cluster_id=process.deployment.cluster_id, name=host).first()
        return _read(node, host, mindie_commands.pod_log_command(namespace, name, lines), f"pod {name}'s log")
    return _read(process.node, process.node_name, tail_command(process.log_path, lines), process.log_path)


def _read(node: Node | None, node_name: str, command: str, what: str) -> str:
    if node is None:
        raise LogUnavailable(f"node {node_name} is no longer in the inventory")
    try:
        target = ssh_target_for(node)
    except NodeNotReady as exc:
        raise LogUnavailable(str(exc)) from None
    try:
        with SshConnection(target, connect_timeout=5, connect_retries=0) as conn:
            result = conn.run(command, timeout=10)
    except SshError as exc:
        raise LogUnavailable(str(exc)) from None
    if not result.ok:
        raise LogUnavailable(f"cannot read {what} on {node_name}: "
                             f"{result.stderr.strip() or f'exit {result.exit_status}'}")
    return result.stdout
