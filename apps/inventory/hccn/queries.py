"""`hccn_tool -i N` query commands: `-ip -g`, `-vnic -g`, `-link -g`, `-net_health -g` (docs/readiness-facts.md §1)."""

from __future__ import annotations

import re

from .values import NET_HEALTH_VALUES, HccnIp, HccnParseError, HccnVnic, is_ip, is_netmask, numbered_lines

_IPADDR = re.compile(r"^ipaddr:(\S+)$")
_NETMASK = re.compile(r"^netmask:(\S+)$")
_LINK = re.compile(r"^link status: (UP|DOWN)$")
_NET_HEALTH = re.compile(r"^net health status: (.+)$")
# Always in this order: DRV tool_ops.c prints link status, then ipaddr, then netmask. No capture was found, so the
# wording is the source's format strings (`vnic ipaddr: %s`, a space after the colon unlike `-ip -g`).
_VNIC = (re.compile(r"^vnic link status: (UP|DOWN)$"), re.compile(r"^vnic ipaddr: (\S+)$"),
         re.compile(r"^vnic netmask: (\S+)$"))
_VNIC_EXPECTED = ("'vnic link status: UP|DOWN'", "'vnic ipaddr: <ip>'", "'vnic netmask: <mask>'")


def _address(number: int, value: str, what: str) -> str:
    if not is_ip(value):
        raise HccnParseError(number, f"an IP address after '{what}'", value)
    return value


def _netmask(number: int, value: str, what: str) -> str:
    if not is_netmask(value):
        raise HccnParseError(number, f"a dotted IPv4 netmask after '{what}'", value)
    return value


def hccn_parse_ip(stdout: str) -> tuple[HccnIp, ...]:
    """`-ip -g`: one `ipaddr:` / `netmask:` pair per port; empty stdout means the device has no IP (its stderr
    then says `Get ipconf failed, ...`: see hccn_classify)."""
    lines = numbered_lines(stdout)
    pairs: list[HccnIp] = []
    for i in range(0, len(lines), 2):
        number, text = lines[i]
        address = _IPADDR.match(text)
        if not address:
            raise HccnParseError(number, "'ipaddr:<ip>'", text)
        if i + 1 >= len(lines):
            raise HccnParseError(number + 1, f"'netmask:<mask>' after 'ipaddr:{address.group(1)}'", None)
        mask_number, mask_text = lines[i + 1]
        mask = _NETMASK.match(mask_text)
        if not mask:
            raise HccnParseError(mask_number, "'netmask:<mask>' after an 'ipaddr:' line", mask_text)
        pairs.append(HccnIp(ipaddr=_address(number, address.group(1), "ipaddr:"),
                            netmask=_netmask(mask_number, mask.group(1), "netmask:")))
    return tuple(pairs)


def hccn_parse_vnic(stdout: str) -> HccnVnic:
    """`-vnic -g` (A3): `vnic link status: UP`, `vnic ipaddr: <ip>`, `vnic netmask: <mask>`."""
    lines = numbered_lines(stdout)
    values: list[str] = []
    for index, (pattern, expected) in enumerate(zip(_VNIC, _VNIC_EXPECTED, strict=True)):
        if index >= len(lines):
            raise HccnParseError(None if not lines else lines[-1][0] + 1, expected, None)
        number, text = lines[index]
        match = pattern.match(text)
        if not match:
            raise HccnParseError(number, expected, text)
        values.append(match.group(1))
    if len(lines) > 3:
        raise HccnParseError(lines[3][0], "nothing after 'vnic netmask:'", lines[3][1])
    return HccnVnic(link_up=values[0] == "UP", ipaddr=_address(lines[1][0], values[1], "vnic ipaddr:"),
                    netmask=_netmask(lines[2][0], values[2], "vnic netmask:"))


def _single_line(stdout: str, expected: str) -> tuple[int, str]:
    lines = numbered_lines(stdout)
    if not lines:
        raise HccnParseError(None, expected, "empty output")
    if len(lines) > 1:
        raise HccnParseError(lines[1][0], f"one line ({expected}) only", lines[1][1])
    return lines[0]


def hccn_parse_link(stdout: str) -> bool:
    """`-link -g`: True for `link status: UP`, False for `link status: DOWN`."""
    number, text = _single_line(stdout, "'link status: UP|DOWN'")
    match = _LINK.match(text)
    if not match:
        raise HccnParseError(number, "'link status: UP|DOWN'", text)
    return match.group(1) == "UP"


def hccn_parse_net_health(stdout: str) -> str:
    """`-net_health -g`: the status word, one of NET_HEALTH_VALUES (healthy: NET_HEALTH_HEALTHY)."""
    number, text = _single_line(stdout, "'net health status: <status>'")
    match = _NET_HEALTH.match(text)
    if not match:
        raise HccnParseError(number, "'net health status: <status>'", text)
    if match.group(1) not in NET_HEALTH_VALUES:
        raise HccnParseError(number, f"a status among {', '.join(sorted(NET_HEALTH_VALUES))}", match.group(1))
    return match.group(1)
