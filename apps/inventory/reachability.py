"""What an SSH failure says about a node: the one mapping from the executor's errors to the node's reachability
and to the advice an operator reads. Discovery, NPU polling and the deployment jobs all use it."""

from __future__ import annotations

from django.utils import timezone

from sshexec import (
    SshAuthFailed,
    SshCommandTimeout,
    SshError,
    SshHostKeyMismatch,
    SshTargetInvalid,
    SshTransferFailed,
)

from .choices import Reachability
from .models import Node


def reachability_of(error: SshError) -> Reachability | None:
    """None when the error says nothing about reaching the node (it answered SSH; a command was slow or a file
    could not be written)."""
    if isinstance(error, SshHostKeyMismatch):
        return Reachability.HOST_KEY_MISMATCH
    if isinstance(error, SshAuthFailed):
        return Reachability.AUTH_FAILED
    if isinstance(error, SshCommandTimeout | SshTransferFailed | SshTargetInvalid):
        return None
    return Reachability.UNREACHABLE  # refused, no route, no banner, a dropped connection: the same to an operator


def ssh_failure_advice(node_name: str, error: SshError) -> str:
    """The error in words, with what to do about it."""
    if isinstance(error, SshHostKeyMismatch):
        return (f"{error}. If {node_name} was reinstalled, fetch and pin its new key on the node page; otherwise "
                "treat this as a possible man-in-the-middle")
    if isinstance(error, SshAuthFailed):
        return f"{error}: check the node's credential"
    if reachability_of(error) == Reachability.UNREACHABLE:
        return f"{error}: is the node up and its sshd running?"
    return str(error)


def node_mark(node: Node, state: Reachability, detail: str = "", *, unless_changed: bool = False) -> bool:
    """Store what was learnt about reaching the node (state, not an operator's change: not audited).
    unless_changed: only if the host key and reachability read with `node` still hold, so that a key pinned or a
    discover finished meanwhile wins over a background poll."""
    fields = {"reachability": state, "reachability_detail": detail[:2000]}
    if state == Reachability.REACHABLE:
        fields["last_seen"] = timezone.now()
    rows = Node.objects.filter(pk=node.pk)
    if unless_changed:
        rows = rows.filter(host_key=node.host_key, reachability=node.reachability)
    return rows.update(**fields) > 0


def mark_ssh_failure(node: Node, error: SshError, *, unless_changed: bool = False) -> str:
    """Record what the failure says about the node, and return the advice to show."""
    state = reachability_of(error)
    if state is not None:
        node_mark(node, state, str(error), unless_changed=unless_changed)
    return ssh_failure_advice(node.name, error)
