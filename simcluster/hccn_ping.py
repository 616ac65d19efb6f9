"""The bodies of `hccn_tool -ping` (RoCE) and `-hccs_ping` (A3 vNIC over HCCS), given which packets came back.

Layouts: docs/readiness-facts.md §1.4. `-ping` follows the captures there; `-hccs_ping` has no capture, so it follows
hicann/driver hccn_product_ext/tool_cmd.c tool_ping_printf(), whose TOOL_PRINT_INFO adds a newline to format
strings that already end in one (hence the blank lines).
"""

from __future__ import annotations

import zlib

PING_COUNT = 3  # both tools send 3 packets unless told otherwise (PING_PACKET_NUM_DEFAULT)


def _jitter(*parts) -> int:
    return zlib.crc32(":".join(map(str, parts)).encode())


def roce_ping(device: int, address: str, received: bool, count: int = PING_COUNT) -> str:
    lines = [f"device {device} PING {address}"]
    for seq in range(count):
        if received:
            # The first packet pays for ARP (1.418 ms in the capture), later ones ~0.04 ms.
            micros = (1300 + _jitter(device, address, seq) % 300) if seq == 0 else 30 + _jitter(device, address, seq) % 25
            lines.append(f"recv seq={seq},time={micros / 1000:.6f}ms")
        else:
            lines.append(f"recv time out seq={seq}")
    got = count if received else 0
    lines.append(f"{count} packets transmitted, {got} received, {100 * (count - got) / count:.2f}% packet loss")
    return "\n".join(lines) + "\n"


def _us(nanos: int) -> str:
    return f"{nanos // 1000}.{nanos % 1000:03d}us"


def hccs_ping(device: int, address: str, received: bool, count: int = PING_COUNT) -> str:
    lines = [f"device {device} PING {address}\n"]
    times = []
    for seq in range(count):
        nanos = 6000 + _jitter(device, address, seq) % 4000 if received else 0
        lines.append("This pkt ping success!" if received else "This pkt send fail!")
        lines.append(f"recv seq {seq}, time = {_us(nanos)}, L1 plane check result = 0x0\n")
        if received:
            times.append(nanos)
    got = len(times)
    lines.append(f"{count} packets transmitted, {got} received, {100 * (count - got) / count:.2f}% packets loss")
    lines.append(f"max time {_us(max(times, default=0))}")
    lines.append(f"min time {_us(min(times, default=0))}")
    lines.append(f"average time {_us(sum(times) // got if got else 0)}")
    lines.append(f"TP95 time {_us(sorted(times)[int(0.95 * got)] if got else 0)}")
    return "\n".join(lines) + "\n"
