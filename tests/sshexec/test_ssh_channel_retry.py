"""A channel a live connection's sshd is too slow to open is asked for once more, not reported as a failure."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from simcluster.sshnode import stop_ssh_node
from sshexec import SshConnection, SshError

pytestmark = pytest.mark.procs  # every test here starts processes or servers

SLOW_ADDRESS = "127.0.10.162"  # this suite's range (127.0.10.150-.169)


def _stop_sessions_for(session_pids, node, seconds: float) -> threading.Timer:
    """SIGSTOP the node's per-connection sshd processes (not its listener) for `seconds`, as a machine too loaded
    to get to them would."""
    pids = session_pids(node)
    assert pids, "the connection has no sshd process to stop"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)

    def resume():
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    timer = threading.Timer(seconds, resume)
    timer.start()
    return timer


@pytest.fixture
def slow_node(start_node):
    node = start_node("slow", SLOW_ADDRESS)
    yield node
    stop_ssh_node(node)


def test_a_channel_open_that_times_out_once_is_asked_again(slow_node, target_for, client_keys, session_pids):
    with SshConnection(target_for(slow_node, client_keys.ed25519), connect_timeout=1.0) as conn:
        assert conn.run("echo warm").stdout == "warm\n"
        timer = _stop_sessions_for(session_pids, slow_node, 1.5)
        try:
            result = conn.run("echo answered")
        finally:
            timer.join()
        assert result.stdout == "answered\n"
        assert conn.connects == 1  # the same connection: nothing was reconnected


def test_a_channel_that_never_opens_fails_after_the_second_ask(slow_node, target_for, client_keys, session_pids):
    with SshConnection(target_for(slow_node, client_keys.ed25519), connect_timeout=1.0) as conn:
        conn.run("true")
        timer = _stop_sessions_for(session_pids, slow_node, 4.0)
        try:
            with pytest.raises(SshError, match="could not open a channel: Timeout opening channel"):
                conn.run("true")
        finally:
            timer.join()
