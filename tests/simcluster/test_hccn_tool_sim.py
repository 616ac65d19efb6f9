"""hccn_tool on simulated nodes: the layouts, streams and exit codes of docs/readiness-facts.md §1 and §5, the
address plan across nodes, and the three hccn faults driven through the fault CLI."""

import re

import pytest

from simcluster import hccn
from simcluster.hccn_plan import render_hccn_conf
from tests.simcluster.npu_node_helpers import fault, make_cluster, run_tool

# The readiness-facts §5 table's regexes.
IPADDR, NETMASK = re.compile(r"^ipaddr:(.+)$"), re.compile(r"^netmask:(.+)$")
LINK = re.compile(r"^link status: (UP|DOWN)$")
HEALTH = re.compile(r"^net health status: (.+)$")
HEALTH_VALUES = {"Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
                 "Thread error", "Detect ip set", "Unknown"}
PING_HEAD = re.compile(r"^device (\d+) PING (\S+)$")
RECV = re.compile(r"^recv seq=(\d+),time=(\d+\.\d{6})ms$")
TIMEOUT = re.compile(r"^recv time out seq=(\d+)$")
SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, (\d+\.\d\d)% packet loss$")
GATEWAY = re.compile(r"^default gateway:(\S+), Iface:eth(\d+)$")
NETDETECT = re.compile(r"^netdetect addr: (\S+)$")
VNIC = re.compile(r"^vnic link status: (UP|DOWN)\nvnic ipaddr: (\S+)\nvnic netmask: (\S+)\n$")
# -hccs_ping: hicann/driver tool_cmd.c tool_ping_printf() (no capture exists).
HCCS_RECV = re.compile(r"^recv seq (\d+), time = \d+\.\d{3}us, L1 plane check result = 0x[0-9a-f]+$")
HCCS_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, (\d+\.\d\d)% packets loss$")

NO_IP_ERR = "Get ipconf failed, because no ip was preset there!\n"


@pytest.fixture
def nodes(tmp_path):
    return make_cluster(tmp_path)


@pytest.fixture
def tool(monkeypatch, capsys, nodes):
    def run(node, *argv):
        return run_tool(monkeypatch, capsys, hccn.main, nodes[node], *argv)
    return run


def ip_of(tool, node, die):
    out, err, code = tool(node, "-i", str(die), "-ip", "-g")
    assert (err, code) == ("", 0)
    first, second = out.splitlines()
    return IPADDR.match(first).group(1), NETMASK.match(second).group(1)


def ping_lines(out):
    lines = out.splitlines()
    head, *body, summary = lines
    return PING_HEAD.match(head), body, SUMMARY.match(summary)


def assert_ping_lost_everything(result, device, address):
    out, err, code = result
    head, body, summary = ping_lines(out)
    assert head.groups() == (str(device), address)
    assert [TIMEOUT.match(line).group(1) for line in body] == ["0", "1", "2"]
    assert summary.groups() == ("3", "0", "100.00")
    assert (err, code) == ("Cmd execute failed!\n", 100)


def test_every_die_of_every_npu_node_has_its_own_address(tool):
    seen = {}
    for position, (node, dies) in enumerate([("node0", 16), ("node1", 16), ("node2", 8)]):
        for die in range(dies):
            address, mask = ip_of(tool, node, die)
            assert (address, mask) == (f"10.20.{die}.{position + 1}", "255.255.255.0")
            seen[address] = (node, die)
    assert len(seen) == 40


def test_a_device_the_node_lacks_is_refused_on_stderr(tool):
    for node, device in [("node0", "16"), ("node2", "8"), ("node0", "x"), ("node0", "123")]:
        assert tool(node, "-i", device, "-ip", "-g") == ("", "Get invalid device id.\n", 4)


def test_a_node_without_npus_has_no_hccn_tool(tool):
    assert tool("proxy", "-i", "0", "-ip", "-g") == ("", "hccn_tool: no NPU on this node\n", 127)


def test_link_health_gateway_netdetect_of_a_healthy_die(tool):
    assert LINK.match(tool("node1", "-i", "5", "-link", "-g")[0].rstrip("\n")).group(1) == "UP"
    assert HEALTH.match(tool("node1", "-i", "5", "-net_health", "-g")[0].rstrip("\n")).group(1) == "Success"
    assert GATEWAY.match(tool("node1", "-i", "5", "-gateway", "-g")[0].rstrip("\n")).groups() == ("10.20.5.254", "5")
    assert NETDETECT.match(tool("node1", "-i", "5", "-netdetect", "-g")[0].rstrip("\n")).group(1) == "10.20.5.254"


def test_ping_reaches_the_die_that_owns_the_address_on_another_node(tool):
    target, _ = ip_of(tool, "node1", 3)
    out, err, code = tool("node0", "-i", "3", "-ping", "-g", "address", target)
    head, body, summary = ping_lines(out)
    assert head.groups() == ("3", target)
    assert [RECV.match(line).group(1) for line in body] == ["0", "1", "2"]
    assert summary.groups() == ("3", "3", "0.00")
    assert (err, code) == ("", 0)
    assert tool("node0", "-i", "3", "-ping", "-g", "address", target, "pkt", "1000")[2] == 0  # pkt: packet size


def test_ping_to_an_address_nobody_owns_loses_every_packet(tool):
    assert_ping_lost_everything(tool("node0", "-i", "0", "-ping", "-g", "address", "10.20.0.200"), 0, "10.20.0.200")


def test_bad_ping_and_set_arguments(tool):
    assert tool("node0", "-i", "0", "-ping", "-g", "address", "10.20.0.300") == (
        "", "The ip address you configured is invalid!\n", 6)
    assert tool("node0", "-i", "0", "-ping", "-g", "adress", "10.20.0.2")[1:] == ("Get unknown option!\n", 3)
    assert tool("node0", "-i", "0", "-ip", "-s", "address", "10.1.1.1", "netmask", "255.0.255.0") == (
        "", "The ip address you configured is invalid!\n", 6)
    taken, _ = ip_of(tool, "node0", 1)
    assert tool("node0", "-i", "0", "-ip", "-s", "address", taken, "netmask", "255.255.255.0") == (
        "", "The ip address configured is conflicted!\n", 7)


def test_hccn_no_ip(tool, nodes, capsys, tmp_path):
    assert fault(capsys, tmp_path, "hccn-no-ip", "--node", "node1", "--die", "3") == "node1 die 3 hccn-no-ip on\n"
    assert tool("node1", "-i", "3", "-ip", "-g") == ("", NO_IP_ERR, 13)
    assert tool("node1", "-i", "3", "-vnic", "-g") == ("", "Command execute failed!\n", 1)
    assert tool("node1", "-i", "3", "-gateway", "-g") == (
        "", "Get gateway failed, because no gateway was preset there!\n", 2)
    health = HEALTH.match(tool("node1", "-i", "3", "-net_health", "-g")[0].rstrip("\n")).group(1)
    assert health in HEALTH_VALUES - {"Success", "Init"}
    assert_ping_lost_everything(tool("node0", "-i", "3", "-ping", "-g", "address", "10.20.3.2"), 3, "10.20.3.2")
    assert_ping_lost_everything(tool("node1", "-i", "3", "-ping", "-g", "address", "10.20.3.1"), 3, "10.20.3.1")
    assert ip_of(tool, "node1", 4) == ("10.20.4.2", "255.255.255.0")  # only that die

    # The fix: set the address again; -ip -g shows it and the fault is gone.
    assert tool("node1", "-i", "3", "-ip", "-s", "address", "10.20.3.2", "netmask", "255.255.255.0") == (
        "Cmd executed successfully!\n", "", 0)
    assert ip_of(tool, "node1", 3) == ("10.20.3.2", "255.255.255.0")
    assert tool("node0", "-i", "3", "-ping", "-g", "address", "10.20.3.2")[2] == 0
    fault(capsys, tmp_path, "hccn-no-ip", "--node", "node1", "--die", "5")
    fault(capsys, tmp_path, "hccn-no-ip", "--node", "node1", "--die", "5", "--off")
    assert ip_of(tool, "node1", 5) == ("10.20.5.2", "255.255.255.0")


def test_a_set_address_is_what_other_nodes_ping(tool):
    assert tool("node2", "-i", "6", "-ip", "-s", "address", "10.20.6.77", "netmask", "255.255.255.0")[2] == 0
    assert tool("node0", "-i", "6", "-ping", "-g", "address", "10.20.6.77")[2] == 0
    assert tool("node0", "-i", "6", "-ping", "-g", "address", "10.20.6.3")[2] == 100  # its old address


def test_hccn_link_down(tool, capsys, tmp_path):
    fault(capsys, tmp_path, "hccn-link-down", "--node", "node0", "--die", "7")
    assert tool("node0", "-i", "7", "-link", "-g") == ("link status: DOWN\n", "", 0)
    health = HEALTH.match(tool("node0", "-i", "7", "-net_health", "-g")[0].rstrip("\n")).group(1)
    assert health == "Fault"  # what the docs show after `-link -s down`
    assert VNIC.match(tool("node0", "-i", "7", "-vnic", "-g")[0]).group(1) == "DOWN"
    assert ip_of(tool, "node0", 7) == ("10.20.7.1", "255.255.255.0")  # the address stays
    assert_ping_lost_everything(tool("node0", "-i", "7", "-ping", "-g", "address", "10.20.7.2"), 7, "10.20.7.2")
    assert_ping_lost_everything(tool("node1", "-i", "7", "-ping", "-g", "address", "10.20.7.1"), 7, "10.20.7.1")
    fault(capsys, tmp_path, "hccn-link-down", "--node", "node0", "--die", "7", "--off")
    assert tool("node0", "-i", "7", "-link", "-g") == ("link status: UP\n", "", 0)
    assert tool("node1", "-i", "7", "-ping", "-g", "address", "10.20.7.1")[2] == 0


def test_hccn_ping_loss(tool, capsys, tmp_path):
    fault(capsys, tmp_path, "hccn-ping-loss", "--node", "node2", "--die", "2")
    assert tool("node2", "-i", "2", "-link", "-g") == ("link status: UP\n", "", 0)
    assert HEALTH.match(tool("node2", "-i", "2", "-net_health", "-g")[0].rstrip("\n")).group(1) in HEALTH_VALUES
    assert_ping_lost_everything(tool("node2", "-i", "2", "-ping", "-g", "address", "10.20.2.1"), 2, "10.20.2.1")
    assert_ping_lost_everything(tool("node0", "-i", "2", "-ping", "-g", "address", "10.20.2.3"), 2, "10.20.2.3")
    assert tool("node0", "-i", "2", "-ping", "-g", "address", "10.20.2.2")[2] == 0  # other dies unaffected
    fault(capsys, tmp_path, "hccn-ping-loss", "--node", "node2", "--die", "2", "--off")
    assert tool("node0", "-i", "2", "-ping", "-g", "address", "10.20.2.3")[2] == 0


def test_vnic_and_hccs_ping_on_a3(tool, capsys, tmp_path):
    link, address, mask = VNIC.match(tool("node1", "-i", "4", "-vnic", "-g")[0]).groups()
    assert (link, address, mask) == ("UP", "192.1.2.195", "255.255.0.0")
    out, err, code = tool("node0", "-i", "4", "-hccs_ping", "-g", "address", address)
    lines = out.splitlines()
    assert PING_HEAD.match(lines[0]).groups() == ("4", address) and lines[1] == ""
    assert [HCCS_RECV.match(line).group(1) for line in lines if line.startswith("recv")] == ["0", "1", "2"]
    assert lines.count("This pkt ping success!") == 3
    assert HCCS_SUMMARY.match(next(x for x in lines if "transmitted" in x)).groups() == ("3", "3", "0.00")
    assert lines[-4:][0].startswith("max time ") and lines[-1].startswith("TP95 time ")
    assert (err, code) == ("", 0)

    fault(capsys, tmp_path, "hccn-link-down", "--node", "node1", "--die", "4")
    out, err, code = tool("node0", "-i", "4", "-hccs_ping", "-g", "address", address)
    assert HCCS_SUMMARY.match(next(x for x in out.splitlines() if "transmitted" in x)).groups() == ("3", "0", "100.00")
    assert out.count("This pkt send fail!") == 3 and (err, code) == ("", 0)
    assert tool("node0", "-i", "4", "-hccs_ping", "-g", "address", "10.20.4.2") == (
        "", "The ip address you configured is invalid!\n", 6)  # not a vNIC address


def test_910b_has_no_vnic_and_no_hccs_ping(tool):
    unsupported = ("The command is not supported on this product.\n", "", 13)
    assert tool("node2", "-i", "0", "-vnic", "-g") == unsupported
    assert tool("node2", "-i", "0", "-hccs_ping", "-g", "address", "192.0.2.199") == unsupported


def test_hccn_conf_holds_the_plan_in_the_real_layout(tool, nodes):
    from simcluster import nodestate

    plan = nodestate.node_config(nodes["node1"])["hccn"]
    text = render_hccn_conf(plan)
    keys = {}
    for line in text.splitlines():
        name, die, value = re.fullmatch(r"(address|netmask|netdetect|gateway)_(\d+)=(\S+)", line).groups()
        keys[(name, int(die))] = value
    assert len(keys) == 4 * 16
    for die in range(16):
        assert (keys[("address", die)], keys[("netmask", die)]) == ip_of(tool, "node1", die)
        assert keys[("netdetect", die)] == f"10.20.{die}.254"
    assert text.startswith("address_0=10.20.0.2\nnetmask_0=255.255.255.0\nnetdetect_0=10.20.0.254\n")
