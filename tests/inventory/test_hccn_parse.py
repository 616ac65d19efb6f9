"""The hccn_tool and /etc/hccn.conf parsers against the verbatim samples of docs/readiness-facts.md, and against
damaged ones: every malformed input names its line."""

import pytest

from apps.inventory.hccn import (
    NET_HEALTH_HEALTHY,
    NET_HEALTH_VALUES,
    HccnFailure,
    HccnIp,
    HccnParseError,
    PingReply,
    hccn_classify,
    hccn_conf_parse,
    hccn_ip_fix_command,
    hccn_parse_hccs_ping,
    hccn_parse_ip,
    hccn_parse_link,
    hccn_parse_net_health,
    hccn_parse_ping,
    hccn_parse_vnic,
)


def error_of(parser, text: str) -> HccnParseError:
    with pytest.raises(HccnParseError) as caught:
        parser(text)
    return caught.value


# --- -ip -g (§1.1) -----------------------------------------------------------------------------------------------

def test_ip_verbatim_blog_capture():
    # §1.1 [CAPTURED] AC blog, `hccn_tool -i 3 -ip -g`
    assert hccn_parse_ip("ipaddr:29.1.112.213\nnetmask:255.255.0.0\n") == (HccnIp("29.1.112.213", "255.255.0.0"),)


def test_ip_verbatim_loop_of_three_devices_keeps_order():
    # §1.1 [CAPTURED] MLLM multi_node.md:45-50, three devices' output with no blank line between them
    text = ("ipaddr:10.10.100.10\nnetmask:255.255.255.0\nipaddr:10.10.100.11\nnetmask:255.255.255.0\n"
            "ipaddr:10.10.100.12\nnetmask:255.255.255.0\n")
    assert [p.ipaddr for p in hccn_parse_ip(text)] == ["10.10.100.10", "10.10.100.11", "10.10.100.12"]


def test_ip_empty_stdout_is_no_ip_and_tolerates_crlf():
    # §1.1 [FIXTURE] MC npu_info_before.txt: device 2 printed only a blank line
    assert hccn_parse_ip("\n") == ()
    assert hccn_parse_ip("ipaddr:192.161.200.10\r\nnetmask:255.255.255.0  \r\n")[0].netmask == "255.255.255.0"


@pytest.mark.parametrize(("text", "line", "expected"), [
    ("ipaddr:10.0.0.1\n", 2, "'netmask:<mask>'"),
    ("netmask:255.255.255.0\n", 1, "'ipaddr:<ip>'"),
    ("ipaddr:10.0.0.1\nnetmask:255.0.255.0\n", 2, "netmask"),
    ("ipaddr:10.0.0.300\nnetmask:255.255.255.0\n", 1, "IP address"),
    ("ipaddr: 10.0.0.1\nnetmask:255.255.255.0\n", 1, "'ipaddr:<ip>'"),  # `-ip -g` has no space after the colon
])
def test_ip_malformed_names_the_line(text, line, expected):
    error = error_of(hccn_parse_ip, text)
    assert error.line == line and expected in error.expected


# --- -vnic -g (§1.2, [SRC] only) --------------------------------------------------------------------------------

VNIC = "vnic link status: UP\nvnic ipaddr: 192.168.2.199\nvnic netmask: 255.255.255.0\n"  # DRV tool_ops.c format


def test_vnic_from_the_source_format():
    vnic = hccn_parse_vnic(VNIC)
    assert (vnic.link_up, vnic.ipaddr, vnic.netmask) == (True, "192.168.2.199", "255.255.255.0")
    assert hccn_parse_vnic(VNIC.replace("UP", "DOWN")).link_up is False


def test_vnic_malformed():
    assert error_of(hccn_parse_vnic, VNIC.replace("vnic ipaddr: ", "vnic ipaddr:")).line == 2
    assert error_of(hccn_parse_vnic, "vnic link status: UP\n").line == 2
    assert error_of(hccn_parse_vnic, VNIC + "vnic link status: UP\n").line == 4


# --- -link -g, -net_health -g (§1.2, §1.3) ----------------------------------------------------------------------

def test_link_up_and_down():
    assert hccn_parse_link("link status: UP\n") is True  # §1.2 [DOC] MC 03_collecting_logs.md:770
    assert hccn_parse_link("link status: DOWN\n") is False  # §1.2 [SRC] the only other value


@pytest.mark.parametrize("text", ["link status: PARTIAL LINK\n", "link status:UP\n", "", "link status: UP\nx\n"])
def test_link_other_shapes_are_errors(text):
    assert error_of(hccn_parse_link, text).line in (None, 1, 2)


def test_net_health_every_value_and_huaweis_healthy_set():
    # §1.3 [FIXTURE] MC npu_info_before.txt:32-33 (the older spelling) and the ten [SRC] values
    assert hccn_parse_net_health("net health status: Socket failed\n") == "Socket failed"
    assert len(NET_HEALTH_VALUES) == 11 and {"Socket fail", "Socket failed"} <= NET_HEALTH_VALUES
    for value in NET_HEALTH_VALUES:
        assert hccn_parse_net_health(f"net health status: {value}\n") == value
    assert NET_HEALTH_HEALTHY == {"Success", "Init"}


def test_net_health_unknown_value_names_the_line():
    error = error_of(hccn_parse_net_health, "\nnet health status: Fine\n")
    assert error.line == 2 and error.got == "Fine"


# --- -ping -g / -hccs_ping -g (§1.4) ----------------------------------------------------------------------------

def test_ping_verbatim_blog_capture():
    # §1.4 [CAPTURED] AC blog, `hccn_tool -i 3 -ping -g address 29.1.137.205`
    ping = hccn_parse_ping("device 3 PING 29.1.137.205\nrecv seq=0,time=1.418000ms\nrecv seq=1,time=0.034000ms\n"
                           "recv seq=2,time=0.040000ms\n3 packets transmitted, 3 received, 0.00% packet loss\n")
    assert (ping.device, ping.address, ping.transmitted, ping.received, ping.loss_percent) == \
        (3, "29.1.137.205", 3, 3, 0.0)
    assert ping.replies[0] == PingReply(seq=0, ok=True, time_ms=1.418)
    assert ping.ok


def test_ping_verbatim_lost_packet_with_letter_o():
    # §1.4 [CAPTURED] MLLM multi_node.md:90-93 (hand-transcribed: `seq=O`)
    ping = hccn_parse_ping("recv time out seq=O\nrecv seq=1,time=0.097000ms\nrecv seq=2,time=0.066000ms\n"
                           "3 packets transmitted, 2 received, 33.33% packet loss\n")
    assert ping.replies[0] == PingReply(seq=0, ok=False, time_ms=None)
    assert (ping.device, ping.received, ping.loss_percent, ping.ok) == (None, 2, 33.33, False)


def test_ping_hand_typo_time_dash_is_read():
    ping = hccn_parse_ping("recv seq=0,time-0.049000ms\n1 packets transmitted, 1 received, 0.00% packet loss\n")
    assert ping.replies[0].time_ms == 0.049


@pytest.mark.parametrize(("text", "line"), [
    ("recv seq=0,time=1ms\n", 2),  # no summary
    ("recv seq=0,time=1ms\n1 packets transmitted, 1 received, 0.00% packets loss\n", 2),  # hccs wording
    ("recv seq=0,time=1ms\n2 packets transmitted, 1 received, 50.00% packet loss\n", 2),  # counts disagree
    ("1 packets transmitted, 1 received, 0.00% packet loss\nextra\n", 2),
    ("device 3 PING 1.2.3.4\nbogus\n", 2),
])
def test_ping_malformed_names_the_line(text, line):
    assert error_of(hccn_parse_ping, text).line == line


# Built from DRV hccn_product_ext/tool_cmd.c tool_ping_printf (§1.4): no capture of hccs_ping was found.
HCCS = """device 0 PING 192.168.2.198

This pkt ping success!
recv seq 0, time = 12.345us, L1 plane check result = 0x0

This pkt send fail!
recv seq 1, time = 0.000us, L1 plane check result = 0x0

2 packets transmitted, 1 received, 50.00% packets loss
max time 12.345us
min time 12.345us
average time 12.345us
TP95 time 12.345us
"""


def test_hccs_ping_from_the_source_format():
    ping = hccn_parse_hccs_ping(HCCS)
    assert (ping.device, ping.address, ping.transmitted, ping.received, ping.loss_percent) == \
        (0, "192.168.2.198", 2, 1, 50.0)
    assert ping.replies == (PingReply(0, True, 0.012345, 0), PingReply(1, False, 0.0, 0))
    assert not ping.ok


def test_hccs_ping_malformed():
    assert error_of(hccn_parse_hccs_ping, HCCS.replace("packets loss", "packet loss")).line == 9
    assert error_of(hccn_parse_hccs_ping, HCCS.replace("This pkt send fail!\n", "")).line == 6
    assert error_of(hccn_parse_hccs_ping, "recv seq 0, time = 1.000us, L1 plane check result = 0x0\n").line == 1


# --- /etc/hccn.conf (§2) ----------------------------------------------------------------------------------------

# §2 [CAPTURED] AC blog; the author's `...` elision line is left out here and tested as an error below.
CONF = """address_0=29.1.137.205
netmask_0=255.255.0.0
netdetect_0=29.1.0.1
gateway_0=29.1.0.1
send_arp_status_0=1
address_7=29.1.170.143
netmask_7=255.255.0.0
netdetect_7=29.1.0.1
gateway_7=29.1.0.1
send_arp_status_7=1
"""


def test_conf_verbatim_groups_by_device():
    conf = hccn_conf_parse("# RDMA 0-7\n\n" + CONF)
    assert list(conf) == [0, 7]
    seven = conf[7]
    assert (seven.address, seven.netmask, seven.netdetect, seven.gateway) == \
        ("29.1.170.143", "255.255.0.0", "29.1.0.1", "29.1.0.1")
    assert dict(seven.other) == {"send_arp_status": "1"}


@pytest.mark.parametrize(("text", "line"), [
    (CONF.replace("send_arp_status_0=1\n", "send_arp_status_0=1\n...\n"), 6),  # the capture's elision
    ("address_0=10.0.0.1\naddress_0=10.0.0.2\n", 2),
    ("address_0=10.0.0.1\nnetmask_0=255.255.255.1\n", 2),
    ("address=10.0.0.1\n", 1),
    ("address_0=\n", 1),
    ("gateway_1=not-an-ip\n", 1),
])
def test_conf_malformed_names_the_line(text, line):
    assert error_of(hccn_conf_parse, text).line == line


# --- failures and the fix (§1.5, §1.8) --------------------------------------------------------------------------

@pytest.mark.parametrize(("stdout", "stderr", "code", "kind"), [
    ("", "Get ipconf failed, because no ip was preset there!\n", 1, HccnFailure.NO_IP),
    ("", "Get invalid device id.\n", 1, HccnFailure.NO_DEVICE),
    ("hccn_tool is busy, please try again.\n", "", 1, HccnFailure.BUSY),
    ("3 packets transmitted, 2 received, 33.33% packet loss\n", "Cmd execute failed!\n", 100, HccnFailure.FAILED),
    ("", "something new\n", 0, HccnFailure.FAILED),
    ("", "", 3, HccnFailure.FAILED),
    ("link status: UP\n", "", 0, None),
])
def test_classify(stdout, stderr, code, kind):
    assert hccn_classify(stdout, stderr, code) == kind


def test_fix_command_takes_hccn_conf_values_first():
    conf = hccn_conf_parse(CONF)
    assert hccn_ip_fix_command(7, conf, address="10.0.0.9", netmask="255.255.255.0") == \
        "hccn_tool -i 7 -ip -s address 29.1.170.143 netmask 255.255.0.0"
    assert hccn_ip_fix_command(3, conf, address="10.0.0.9", netmask="255.255.255.0") == \
        "hccn_tool -i 3 -ip -s address 10.0.0.9 netmask 255.255.255.0"


def test_fix_command_refuses_missing_or_bad_values():
    with pytest.raises(ValueError, match="hccn.conf has no address_3"):
        hccn_ip_fix_command(3, hccn_conf_parse(CONF))
    with pytest.raises(ValueError, match="not an IP"):
        hccn_ip_fix_command(0, address="1.2.3.4; reboot", netmask="255.255.255.0")
    with pytest.raises(ValueError, match="0-99"):
        hccn_ip_fix_command(100, address="1.2.3.4", netmask="255.255.255.0")
