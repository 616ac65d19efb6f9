"""One real OpenSSH node: key auth, pinned host key, the session environment the contract promises."""

import paramiko
import pytest

from simcluster.sshnode import pid_alive, start_ssh_node, stop_ssh_node
from tests.simcluster.simtest_helpers import ssh_connect, ssh_run

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def test_session_sees_node_env_and_bin_dir_first(state_root, client_key):
    key_path, public = client_key
    bin_dir = state_root / "bin"
    bin_dir.mkdir()
    (bin_dir / "whereami").write_text("#!/bin/sh\necho \"on $SIMCLUSTER_NODE\"\n")
    (bin_dir / "whereami").chmod(0o755)
    node = start_ssh_node("n100", "127.0.10.100", 22, state_root / "n100", public, bin_dir=bin_dir,
                          env={"EXTRA": "x y"})
    try:
        client = ssh_connect(node.address, node.port, node.host_key_line, key_path)
        rc, out, _ = ssh_run(client, 'echo "$PATH|$SIMCLUSTER_NODE_DIR|$EXTRA"; whereami; id -un')
        client.close()
        path, node_dir, extra, where, user = out.split("\n")[0].split("|") + out.split("\n")[1:3]
        assert rc == 0
        assert path.split(":")[0] == str(bin_dir)
        assert node_dir == str(state_root / "n100")
        assert extra == "x y"
        assert where == "on n100"
        assert user == "simnode"
    finally:
        stop_ssh_node(node)
    assert not pid_alive(node.pid)


def test_wrong_host_key_is_rejected(state_root, client_key):
    key_path, public = client_key
    node = start_ssh_node("n101", "127.0.10.101", 2222, state_root / "n101", public)
    other = start_ssh_node("n102", "127.0.10.102", 2222, state_root / "n102", public)
    try:
        assert node.known_hosts_line.startswith("[127.0.10.101]:2222 ssh-ed25519 ")
        with pytest.raises(paramiko.BadHostKeyException):
            ssh_connect(node.address, node.port, other.host_key_line, key_path)
    finally:
        stop_ssh_node(node)
        stop_ssh_node(other)
