"""`hccn_tool -i N -ping -g address X` (A2) and `-hccs_ping -g address X` (A3) (docs/readiness-facts.md §1.4).

Any lost packet also makes hccn_tool exit non-zero with `Cmd execute failed!` on stderr, while stdout still
carries the summary: parse stdout for the figures, classify stderr with hccn_classify.
"""

from __future__ import annotations

import re

from .values import HccnParseError, HccnPing, PingReply, numbered_lines

_HEADER = re.compile(r"^device (\d+) PING (\S+)$")
# `time-0.049000ms` and `seq=O` (letter O) occur in MindIE's hand-transcribed captures: read them as `=` and 0.
_REPLY = re.compile(r"^recv seq=([0-9O]+),time[=-]([0-9.]+)ms$")
_TIMEOUT = re.compile(r"^recv time out seq=([0-9O]+)$")
_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, ([0-9.]+)% packet loss$")
# No capture shows these two; DRV ds_net_ext.c only looks for the words inside the device's reply body.
_PROBLEMS = ("Destination Host Unreachable", "Message too long")

# hccs_ping: DRV hccn_product_ext/tool_cmd.c tool_ping_printf(). No capture was found: these are its format strings.
_HCCS_STATUS = {"This pkt ping success!": True, "This pkt ping not start to send!": False,
                "This pkt send fail!": False, "This pkt check recv msg fail!": False}
_HCCS_REPLY = re.compile(r"^recv seq (\d+), time = (\d+\.\d+)us, L1 plane check result = 0x([0-9a-fA-F]+)$")
_HCCS_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, ([0-9.]+)% packets loss$")
_HCCS_TIMES = re.compile(r"^(max|min|average|TP95) time \d+\.\d+us$")


def _seq(value: str) -> int:
    return int(value.replace("O", "0"))


def _summary(number: int, match: re.Match, replies: list[PingReply], problems: list[str]) -> tuple[int, int, float]:
    transmitted, received, loss = int(match.group(1)), int(match.group(2)), float(match.group(3))
    if received > transmitted:
        raise HccnParseError(number, "received <= transmitted in the summary", match.group(0))
    if transmitted and abs(loss - 100 * (transmitted - received) / transmitted) > 0.01:
        raise HccnParseError(number, "a loss % that matches transmitted and received", match.group(0))
    if replies and not problems:
        answered = sum(r.ok for r in replies)
        if (transmitted, received) != (len(replies), answered):
            raise HccnParseError(number, f"a summary counting the {len(replies)} packets above "
                                         f"({answered} answered)", match.group(0))
    return transmitted, received, loss


def hccn_parse_ping(stdout: str) -> HccnPing:
    """`-ping -g address X`: optional `device N PING X`, one line per packet, then the summary line."""
    lines = numbered_lines(stdout)
    if not lines:
        raise HccnParseError(None, "ping output ending in 'N packets transmitted, ...'", "empty output")
    device = address = None
    replies: list[PingReply] = []
    problems: list[str] = []
    for position, (number, text) in enumerate(lines):
        if position == 0 and (header := _HEADER.match(text)):
            device, address = int(header.group(1)), header.group(2)
        elif reply := _REPLY.match(text):
            replies.append(PingReply(seq=_seq(reply.group(1)), ok=True, time_ms=float(reply.group(2))))
        elif timeout := _TIMEOUT.match(text):
            replies.append(PingReply(seq=_seq(timeout.group(1)), ok=False, time_ms=None))
        elif any(p in text for p in _PROBLEMS):
            problems.append(text)
        elif summary := _SUMMARY.match(text):
            if position != len(lines) - 1:
                raise HccnParseError(lines[position + 1][0], "nothing after the summary line", lines[position + 1][1])
            transmitted, received, loss = _summary(number, summary, replies, problems)
            return HccnPing(device=device, address=address, replies=tuple(replies), transmitted=transmitted,
                            received=received, loss_percent=loss, problems=tuple(problems))
        else:
            raise HccnParseError(number, "'recv seq=N,time=T ms', 'recv time out seq=N' or the summary line", text)
    raise HccnParseError(lines[-1][0] + 1, "'N packets transmitted, M received, L% packet loss'", None)


def hccn_parse_hccs_ping(stdout: str) -> HccnPing:
    """A3 `-hccs_ping -g address X`: `device N PING X`, per packet a status line and `recv seq N, time = T us,
    L1 plane check result = 0xH`, then `... % packets loss` and the max/min/average/TP95 time lines."""
    lines = numbered_lines(stdout)
    if not lines:
        raise HccnParseError(None, "'device N PING <address>'", "empty output")
    number, text = lines[0]
    header = _HEADER.match(text)
    if not header:
        raise HccnParseError(number, "'device N PING <address>'", text)
    replies: list[PingReply] = []
    status: bool | None = None
    summary: tuple[int, int, float] | None = None
    for number, text in lines[1:]:
        if summary is not None:
            if not _HCCS_TIMES.match(text):
                raise HccnParseError(number, "'max|min|average|TP95 time T us' after the summary", text)
        elif text in _HCCS_STATUS and status is None:
            status = _HCCS_STATUS[text]
        elif (reply := _HCCS_REPLY.match(text)) and status is not None:
            replies.append(PingReply(seq=int(reply.group(1)), ok=status, time_ms=float(reply.group(2)) / 1000,
                                     plane_check=int(reply.group(3), 16)))
            status = None
        elif (match := _HCCS_SUMMARY.match(text)) and status is None:
            summary = _summary(number, match, [], [])
        else:
            expected = "'recv seq N, time = T us, L1 plane check result = 0xH'" if status is not None else \
                "'This pkt ...' status line or 'N packets transmitted, M received, L% packets loss'"
            raise HccnParseError(number, expected, text)
    if summary is None:
        raise HccnParseError(lines[-1][0] + 1, "'N packets transmitted, M received, L% packets loss'", None)
    transmitted, received, loss = summary
    return HccnPing(device=int(header.group(1)), address=header.group(2), replies=tuple(replies),
                    transmitted=transmitted, received=received, loss_percent=loss)
