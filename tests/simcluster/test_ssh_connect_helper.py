"""The tests' own SSH helper (tests/simcluster/simtest_helpers.py) tries a broken handshake again, as the product's
sshexec does, and never a refused key: a full run once failed on one "Invalid packet blocking" mid key exchange."""

import paramiko
import pytest

from tests.simcluster import simtest_helpers

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEGrXSZqOawpeQYfz5XLTPYSPJihUz5lDyzLVTF+WfFs"


def _connect_failing_with(monkeypatch, *errors):
    calls = []

    def connect(self, *args, **kwargs):
        calls.append(args)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    monkeypatch.setattr(simtest_helpers.time, "sleep", lambda s: None)
    return calls


def test_a_broken_handshake_is_tried_again_on_a_new_connection(monkeypatch):
    calls = _connect_failing_with(monkeypatch, paramiko.SSHException("Invalid packet blocking"))
    client = simtest_helpers.ssh_connect("127.0.10.1", 22, HOST_KEY, "/nonexistent/key")
    assert isinstance(client, paramiko.SSHClient) and len(calls) == 2


def test_a_refused_key_is_not_tried_again(monkeypatch):
    calls = _connect_failing_with(monkeypatch, paramiko.AuthenticationException("no"))
    with pytest.raises(paramiko.AuthenticationException):
        simtest_helpers.ssh_connect("127.0.10.1", 22, HOST_KEY, "/nonexistent/key")
    assert len(calls) == 1


def test_it_gives_up_after_its_attempts(monkeypatch):
    calls = _connect_failing_with(monkeypatch, *[EOFError()] * 3)
    with pytest.raises(EOFError):
        simtest_helpers.ssh_connect("127.0.10.1", 22, HOST_KEY, "/nonexistent/key")
    assert len(calls) == 3
