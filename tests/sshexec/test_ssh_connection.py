"""SshConnection against real OpenSSH nodes: commands, streaming, errors, reconnect, SFTP, fork."""

from __future__ import annotations

import os
import socket
import time

import paramiko
import pytest

from simcluster.sshnode import stop_ssh_node
from sshexec import (
    SshAuthFailed,
    SshCommandTimeout,
    SshConnection,
    SshHostKeyMismatch,
    SshTarget,
    SshUnreachable,
    host_key_fingerprint,
)

pytestmark = pytest.mark.procs  # every test here starts processes or servers

# Addresses from this suite's range (127.0.10.150-.169); the farm uses .150-.157.
RESTART_ADDRESS = "127.0.10.160"  # the node the reconnect test stops and starts again
SILENT_ADDRESS = "127.0.10.168"  # a TCP listener that never speaks SSH
DEAD_ADDRESS = "127.0.10.169"  # nothing listens here
SFTP_ADDRESS = "127.0.10.161"  # a node without an sftp subsystem


def test_run_returns_output_exit_status_and_node_env(target):
    with SshConnection(target) as conn:
        result = conn.run("echo out; echo err >&2; echo $SIMCLUSTER_NODE; exit 3", timeout=10)
    assert result.exit_status == 3 and not result.ok
    assert result.stdout == "out\nnode0\n"
    assert result.stderr == "err\n"
    assert 0 < result.duration < 5


def test_output_streams_line_by_line_in_arrival_order(target):
    seen: list[tuple[float, str, str]] = []
    started = time.monotonic()
    with SshConnection(target) as conn:
        result = conn.run("echo a; sleep 0.3; echo b >&2; sleep 0.3; printf 'c\\nno-newline'", timeout=10,
                          on_output=lambda stream, line: seen.append((time.monotonic() - started, stream, line)))
    assert [(s, line) for _, s, line in seen] == [("stdout", "a"), ("stderr", "b"), ("stdout", "c"),
                                                  ("stdout", "no-newline")]
    # "a" reached the callback while the command was still sleeping, not at the end.
    assert seen[0][0] < seen[-1][0] - 0.4
    assert result.stdout == "a\nc\nno-newline"


def test_exit_codes_and_a_killed_process(target):
    with SshConnection(target) as conn:
        assert conn.run("true").exit_status == 0
        assert conn.run("exit 42").exit_status == 42
        assert conn.run("nonexistent-command-xyz").exit_status == 127
        killed = conn.run("kill -9 $$")
    assert killed.exit_status != 0


def test_command_timeout_leaves_the_connection_usable(target):
    with SshConnection(target) as conn:
        started = time.monotonic()
        with pytest.raises(SshCommandTimeout) as caught:
            conn.run("echo begun; sleep 5", timeout=0.5)
        assert time.monotonic() - started < 2
        assert "node0" in str(caught.value) and "0.5s" in str(caught.value)
        assert caught.value.stdout == "begun\n"
        assert conn.run("echo still-here").stdout == "still-here\n"
        assert conn.connects == 1


def test_changed_host_key_is_rejected_loudly(target, farm, target_for):
    other = farm[1].host_key_line  # a real key, but not this server's
    conn = SshConnection(target_for(farm[0], target.private_key, host_key=other))
    with pytest.raises(SshHostKeyMismatch) as caught:
        conn.run("true")
    expected = host_key_fingerprint(other)
    presented = host_key_fingerprint(farm[0].host_key_line)
    assert str(caught.value) == (f"host key for node0 ({farm[0].address}:22) changed: "
                                 f"expected {expected}, got {presented}")


def test_unknown_key_type_is_rejected(target, farm, client_keys, target_for):
    # Pinning an ECDSA key for a server that only has Ed25519: never "learn" the other key.
    pinned = client_keys.ecdsa_public
    with pytest.raises(SshHostKeyMismatch) as caught:
        SshConnection(target_for(farm[0], target.private_key, host_key=pinned)).run("true")
    assert f"expected {host_key_fingerprint(pinned)}, got {host_key_fingerprint(farm[0].host_key_line)}" in str(
        caught.value)


def test_unauthorized_key_is_refused_without_leaking_it(farm, client_keys, target_for):
    conn = SshConnection(target_for(farm[0], client_keys.unauthorized))
    with pytest.raises(SshAuthFailed) as caught:
        conn.run("true")
    message = str(caught.value)
    assert "publickey" in message and "'simnode'" in message and "node0" in message
    assert "PRIVATE KEY" not in message and client_keys.unauthorized[40:80] not in message
    assert conn.connects == 0


def test_password_refused_without_leaking_it(farm, target_for):
    secret = "hunter2-$(not-run)"
    conn = SshConnection(target_for(farm[0], None, password=secret))
    with pytest.raises(SshAuthFailed) as caught:
        conn.run("true")
    assert "password" in str(caught.value) and secret not in str(caught.value)
    assert secret not in repr(conn.target)


@pytest.mark.parametrize("key_name", ["ecdsa", "rsa_pem"])
def test_ecdsa_and_pem_rsa_keys_log_in(farm, client_keys, key_name, target_for):
    with SshConnection(target_for(farm[0], getattr(client_keys, key_name))) as conn:
        assert conn.run("id -un").stdout == "simnode\n"


def test_unreachable_names_address_port_and_cause(target):
    dead = SshTarget("ghost", DEAD_ADDRESS, 22, "simnode", target.private_key, None, target.host_key)
    conn = SshConnection(dead, connect_retries=1, retry_delay=0.01)
    with pytest.raises(SshUnreachable) as caught:
        conn.run("true")
    assert str(caught.value) == (f"ghost ({DEAD_ADDRESS}:22) unreachable: "
                                 "connection refused (nothing listens on that port)")


def test_server_that_never_speaks_ssh_times_out_on_the_banner(target):
    listener = socket.socket()
    listener.bind((SILENT_ADDRESS, 0))
    listener.listen(8)  # the kernel completes the handshake; nobody ever writes a banner
    port = listener.getsockname()[1]
    try:
        silent = SshTarget("mute", SILENT_ADDRESS, port, "simnode", target.private_key, None, target.host_key)
        started = time.monotonic()
        with pytest.raises(SshUnreachable, match=rf"mute \({SILENT_ADDRESS}:{port}\) unreachable: no SSH banner"):
            SshConnection(silent, connect_timeout=0.5, connect_retries=0).run("true")
        assert time.monotonic() - started < 3
    finally:
        listener.close()


def test_reconnects_after_the_server_restarted(start_node, target_for, session_pids, client_keys):
    node = start_node("restart", RESTART_ADDRESS)
    try:
        conn = SshConnection(target_for(node, client_keys.ed25519), retry_delay=0.2)
        assert conn.run("echo one").stdout == "one\n"
        sessions = session_pids(node)
        assert sessions, "the live connection should have an sshd session process"
        stop_ssh_node(node)
        for pid in sessions:  # end the open session too, as a reboot would
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while conn._client.get_transport().is_active() and time.monotonic() < deadline:
            time.sleep(0.02)
        node = start_node("restart", RESTART_ADDRESS)
        assert conn.run("echo two").stdout == "two\n"
        assert conn.connects == 2
        conn.close()
    finally:
        stop_ssh_node(node)


def _put_and_read(conn, directory):
    path = f"{directory}/conf/app.json"
    conn.run(f"mkdir -p {directory}/conf")
    conn.put_text(path, '{"a": "b\'c $(x)"}\n', mode=0o600)
    return conn.run(f"cat {path}; stat -c %a {path}; ls -a {directory}/conf").stdout


def test_put_text_over_sftp(target, farm):
    with SshConnection(target) as conn:
        sftp = conn.open_sftp()  # the sim nodes serve SFTP, as Debian's sshd does
        sftp.close()
        assert _put_and_read(conn, farm[0].state_dir) == '{"a": "b\'c $(x)"}\n600\n.\n..\napp.json\n'


def test_put_text_without_sftp_subsystem_falls_back_to_a_command(start_node, target_for, client_keys):
    node = start_node("nosftp", SFTP_ADDRESS, sftp=False)
    try:
        with SshConnection(target_for(node, client_keys.ed25519)) as conn:
            with pytest.raises(paramiko.SSHException):
                conn.open_sftp()
            assert _put_and_read(conn, node.state_dir) == '{"a": "b\'c $(x)"}\n600\n.\n..\napp.json\n'
    finally:
        stop_ssh_node(node)


def test_connection_is_reopened_in_a_forked_child(target):
    conn = SshConnection(target)
    assert conn.run("echo parent").stdout == "parent\n"
    parent_transport = conn._client.get_transport()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not touch the parent's socket
        try:
            os.close(read_end)
            out = conn.run("echo child", timeout=10).stdout
            fresh = conn._client.get_transport() is not parent_transport and conn.connects == 1
            os.write(write_end, f"{out.strip()} {fresh}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = os.read(read_end, 100).decode()
    os.close(read_end)
    assert status == 0 and report == "child True"
    # The parent's connection was neither closed nor corrupted by the child.
    assert conn.run("echo parent-again").stdout == "parent-again\n"
    assert conn._client.get_transport() is parent_transport and conn.connects == 1
    conn.close()


def test_a_command_reading_stdin_sees_eof_instead_of_hanging(target):
    with SshConnection(target) as conn:
        assert conn.run("cat; echo done", timeout=5).stdout == "done\n"
        assert conn.run("cat", timeout=5, stdin=b"fed\n").stdout == "fed\n"
