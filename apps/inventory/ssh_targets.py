"""Turns inventory rows into the plain values the SSH executor takes (it never sees models)."""

from sshexec import SshTarget

from .choices import CredentialKind
from .models import Node


class NodeNotReady(Exception):
    """The node lacks something SSH needs (credential, pinned host key); the message says what to do."""


def ssh_target_for(node: Node) -> SshTarget:
    if node.credential is None:
        raise NodeNotReady(f"node {node.name} has no SSH credential: choose one on the node's edit page")
    if not node.host_key:
        raise NodeNotReady(
            f"node {node.name} has no pinned host key: use 'Fetch host key' on the node page, check the "
            "fingerprint, and pin it (unknown keys are never accepted)"
        )
    cred = node.credential
    if cred.secret_problem:
        raise NodeNotReady(f"node {node.name}: credential {cred.name}: {cred.secret_problem}")
    is_key = cred.kind == CredentialKind.PRIVATE_KEY
    return SshTarget(
        name=node.name, address=node.address, port=node.ssh_port, username=node.login_user,
        private_key=cred.secret if is_key else None, password=None if is_key else cred.secret,
        host_key=node.host_key.strip(),
    )
