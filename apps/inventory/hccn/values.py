"""The typed values the hccn_tool and /etc/hccn.conf parsers produce, and the error they raise."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from ..output_errors import OutputParseError

# `net health status: %s` values, DRV tool_ops.c g_net_health_status[] (docs/readiness-facts.md §1.3), plus
# `Socket failed`: the spelling of an older build seen in MC's fixture.
NET_HEALTH_VALUES = frozenset({
    "Success", "Socket fail", "Socket failed", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
    "Thread error", "Detect ip set", "Unknown",
})
# What Huawei's own device plugin counts as healthy (MC hccn_tool.go): Init is a probe still starting.
NET_HEALTH_HEALTHY = frozenset({"Success", "Init"})


class HccnParseError(OutputParseError):
    """`hccn_tool` output or /etc/hccn.conf in a layout we do not know."""


class HccnFailure(StrEnum):
    """What a failed hccn_tool call means, read from its known error lines."""

    NO_IP = "no_ip"  # the device has no IP configured
    NO_DEVICE = "no_device"  # no device with that physical id
    BUSY = "busy"  # another hccn_tool runs: retry later, one device at a time
    FAILED = "failed"  # anything else, e.g. a ping that lost packets


@dataclass(frozen=True)
class HccnIp:
    """One `ipaddr:` / `netmask:` pair of `hccn_tool -i N -ip -g` (one per RoCE port)."""

    ipaddr: str
    netmask: str


@dataclass(frozen=True)
class HccnVnic:
    """`hccn_tool -i N -vnic -g` on A3: the vNIC used for HCCS traffic."""

    link_up: bool
    ipaddr: str
    netmask: str


@dataclass(frozen=True)
class PingReply:
    seq: int
    ok: bool
    time_ms: float | None  # None for a packet that timed out
    plane_check: int | None = None  # hccs_ping's `L1 plane check result`; the plain ping has none


@dataclass(frozen=True)
class HccnPing:
    """`-ping -g address X` or A3's `-hccs_ping -g address X`."""

    device: int | None  # from `device N PING X`; None when the output was cut before it
    address: str | None
    replies: tuple[PingReply, ...]
    transmitted: int
    received: int
    loss_percent: float
    problems: tuple[str, ...] = ()  # `Destination Host Unreachable` / `Message too long` lines

    @property
    def ok(self) -> bool:
        return (self.transmitted > 0 and self.received == self.transmitted and self.loss_percent == 0
                and all(r.ok for r in self.replies) and not self.problems)


@dataclass(frozen=True)
class HccnDeviceConf:
    """The `<key>_<device>=value` lines of /etc/hccn.conf for one physical device."""

    device: int
    address: str | None = None
    netmask: str | None = None
    netdetect: str | None = None
    gateway: str | None = None
    other: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # send_arp_status, mtu, ...


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def is_netmask(value: str) -> bool:
    """A dotted IPv4 netmask whose one bits are contiguous (255.255.0.0, not 255.0.255.0)."""
    try:
        bits = int(ipaddress.IPv4Address(value))
    except ValueError:
        return False
    inverted = ~bits & 0xFFFFFFFF
    return inverted & (inverted + 1) == 0


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """(1-based number, text) of the non-blank lines, without `\\r` or surrounding spaces."""
    return [(n, t.strip()) for n, t in enumerate(text.splitlines(), 1) if t.strip()]
