"""The drain/undrain command runs on the proxy node and talks to the admin listener on its loopback only."""

from __future__ import annotations

import shlex

from sshexec import probe_commands as remote


def test_admin_command_targets_the_loopback_admin_port():
    command = remote.proxy_admin_command(admin_host="127.0.0.1", admin_port=2000, header_file="/var/lib/pdcp/ref/secrets/proxy-admin.header",
                                         role="decode", backend="127.0.10.3:7101", action="drain")
    words = shlex.split(command)
    assert words[-1] == "http://127.0.0.1:2000/admin/instances/decode/127.0.10.3:7101/drain"
    assert "-H" in words and words[words.index("-H") + 1] == "@/var/lib/pdcp/ref/secrets/proxy-admin.header"
