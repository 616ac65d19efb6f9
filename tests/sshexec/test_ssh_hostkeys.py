"""First-use trust helpers and the secret-free repr of a target."""

from __future__ import annotations

import subprocess

import pytest

from sshexec import SshTarget, SshTargetInvalid, SshUnreachable, fetch_host_key, host_key_fingerprint


@pytest.mark.procs
def test_fetch_host_key_returns_the_servers_key(farm):
    assert fetch_host_key(farm[0].address, 22, timeout=5) == farm[0].host_key_line


@pytest.mark.procs
def test_fingerprint_matches_ssh_keygen(farm):
    pub = farm[0].state_dir / "ssh_host_ed25519_key.pub"
    printed = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout
    assert host_key_fingerprint(farm[0].host_key_line) == printed.split()[1]


def test_fetch_host_key_from_nowhere_is_unreachable():
    with pytest.raises(SshUnreachable, match=r"127\.0\.10\.169:22\) unreachable: connection refused"):
        fetch_host_key("127.0.10.169", 22, timeout=2)


@pytest.mark.procs
def test_repr_never_shows_secrets(farm, client_keys):
    target = SshTarget("node0", farm[0].address, 22, "simnode", client_keys.ed25519, "pa$$word", farm[0].host_key_line)
    text = repr(target) + str(target) + repr([target])
    assert "PRIVATE" not in text and "pa$$word" not in text and client_keys.ed25519.splitlines()[1] not in text
    assert "SHA256:" in text and "node0" in text


@pytest.mark.procs
@pytest.mark.parametrize("host_key", ["", "ssh-ed25519", "ssh-ed25519 not*base64", "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIA=="])
def test_malformed_pinned_host_key_is_refused_up_front(farm, client_keys, host_key):
    with pytest.raises(SshTargetInvalid):
        SshTarget("node0", farm[0].address, 22, "simnode", client_keys.ed25519, None, host_key)
