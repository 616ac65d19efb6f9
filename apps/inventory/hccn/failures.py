"""What a failed hccn_tool call means, from its known error lines, and the command that sets a missing IP."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from .values import HccnDeviceConf, HccnFailure, is_ip, is_netmask

# DRV cmd.c error table (docs/readiness-facts.md §1.1, §1.5, §1.8). Only `hccn_tool is busy` goes to stdout.
_KNOWN_LINES = {
    "Get ipconf failed, because no ip was preset there!": HccnFailure.NO_IP,
    "Get invalid device id.": HccnFailure.NO_DEVICE,
    "The device is not exist!": HccnFailure.NO_DEVICE,
    "hccn_tool is busy, please try again.": HccnFailure.BUSY,
    "Cmd execute failed!": HccnFailure.FAILED,
}
# The more specific line wins when several are printed (a failure also ends in `Cmd execute failed!`).
_PRECEDENCE = (HccnFailure.BUSY, HccnFailure.NO_DEVICE, HccnFailure.NO_IP, HccnFailure.FAILED)


def hccn_classify(stdout: str, stderr: str, exit_code: int | None = None) -> HccnFailure | None:
    """None when the call succeeded; else what failed. Unknown stderr or a non-zero exit is FAILED."""
    kinds = {_KNOWN_LINES[line.strip()] for line in (stdout + "\n" + stderr).splitlines()
             if line.strip() in _KNOWN_LINES}
    if stderr.strip() or exit_code:
        kinds.add(HccnFailure.FAILED)
    return next((kind for kind in _PRECEDENCE if kind in kinds), None)


def hccn_ip_fix_command(device: int, conf: Mapping[int, HccnDeviceConf] | None = None, *,
                        address: str | None = None, netmask: str | None = None, tool: str = "hccn_tool") -> str:
    """`hccn_tool -i <dev> -ip -s address <ip> netmask <mask>`, taking the address and netmask from hccn.conf
    (hccn_conf_parse) when it has them, else from the arguments. Setting the IP also persists it in hccn.conf."""
    if not 0 <= device <= 99:
        raise ValueError(f"device must be a physical id 0-99, not {device}")
    persisted = (conf or {}).get(device)
    address = (persisted.address if persisted else None) or address
    netmask = (persisted.netmask if persisted else None) or netmask
    for key, value in (("address", address), ("netmask", netmask)):
        if value is None:
            raise ValueError(f"no {key} for device {device}: /etc/hccn.conf has no {key}_{device} and none was given")
    if not is_ip(address):
        raise ValueError(f"address for device {device} is not an IP address: {address!r}")
    if not is_netmask(netmask):
        raise ValueError(f"netmask for device {device} is not a dotted IPv4 netmask: {netmask!r}")
    argv = (tool, "-i", str(device), "-ip", "-s", "address", address, "netmask", netmask)
    return " ".join(shlex.quote(word) for word in argv)
