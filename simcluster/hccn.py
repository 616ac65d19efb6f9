"""`hccn_tool` emulator: the NPU NICs of a simulated node (`python -m simcluster.hccn -i N ...`).

Played, for physical device id N: `-ip -g`, `-ip -s address IP netmask MASK`, `-vnic -g` and `-hccs_ping -g
address IP [cnt K] [pkt SIZE]` (A3 only), `-link -g`, `-net_health -g`, `-netdetect -g`, `-gateway -g`,
`-ping -g address IP [pkt SIZE]` (pkt is the packet size, as for the real tool; 3 packets are sent).
Texts are docs/readiness-facts.md §1's; exit codes are the tool's UDA_* return codes truncated to 8 bits
(hicann/driver hccn_tool/ossl_user_linux.h, main.c). Addresses: simcluster/hccn_plan.py. Faults (faults.json, by
physical id): hccn_no_ip, hccn_link_down, hccn_ping_loss.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

from simcluster import hccn_ping, nodestate
from simcluster.hccn_plan import address_owner, die_address, die_reachable
from simcluster.spec import HARDWARE

Result = tuple[str, str, int]  # stdout, stderr, exit code

INVALID_DEVICE: Result = ("", "Get invalid device id.\n", 0x1004 & 0xFF)  # UDA_MAJOR_CMD_DEV_ID_ERR
NO_IP: Result = ("", "Get ipconf failed, because no ip was preset there!\n", 0x400D & 0xFF)  # ..._IPCONF_NOT_PRESET
NO_GATEWAY: Result = ("", "Get gateway failed, because no gateway was preset there!\n", 0x4002 & 0xFF)
# tool_get_vnic_ipaddr() turns any failure into UDA_DSMI_EXE_ERR, printed from cmd.c's table.
VNIC_FAILED: Result = ("", "Command execute failed!\n", 0x4001 & 0xFF)
INVALID_IP: Result = ("", "The ip address you configured is invalid!\n", 0x2006 & 0xFF)
CONFLICT_IP: Result = ("", "The ip address configured is conflicted!\n", 0x2007 & 0xFF)
UNKNOWN_OPTION: Result = ("", "Get unknown option!\n", 0x2003 & 0xFF)  # the real tool lists the options after it
# An INFO-level line, so stdout (cmd.c); only A3 boards run -hccs_ping and -vnic.
NOT_ON_PRODUCT: Result = ("The command is not supported on this product.\n", "", 0x300D & 0xFF)
PING_INNER_ERROR = 100  # a lost packet (ds_net_ext.c), reported by main() as "Cmd execute failed!"


class Die:
    def __init__(self, node_dir: Path, die: int, hardware: str):
        self.node_dir, self.die, self.hardware = node_dir, die, hardware
        self.faults = nodestate.faults(node_dir)

    def has(self, fault: str) -> bool:
        return self.die in self.faults.get(fault, [])

    def plan(self) -> dict:
        return nodestate.node_config(self.node_dir)["hccn"][self.die]


def ip(die: Die, args: list[str]) -> Result:
    if args == ["-g"]:
        address = die_address(die.node_dir, die.die)
        return (f"ipaddr:{address}\nnetmask:{die.plan()['netmask']}\n", "", 0) if address else NO_IP
    if args[:1] == ["-s"]:
        return ip_set(die, args[1:])
    return UNKNOWN_OPTION


def ip_set(die: Die, args: list[str]) -> Result:
    values = dict(zip(args[::2], args[1::2], strict=False))
    if len(args) != 4 or set(values) != {"address", "netmask"}:
        return UNKNOWN_OPTION
    try:
        ipaddress.IPv4Address(values["address"])
        ipaddress.IPv4Network(f"0.0.0.0/{values['netmask']}")
    except ValueError:
        return INVALID_IP
    config = nodestate.node_config(die.node_dir)
    others = [d for d in range(len(config["hccn"])) if d != die.die]
    if values["address"] in {die_address(die.node_dir, d) for d in others}:
        return CONFLICT_IP
    config["hccn"][die.die] |= {"address": values["address"], "netmask": values["netmask"]}
    nodestate.write_json(die.node_dir / "node.json", config)
    nodestate.set_fault(die.node_dir, "hccn_no_ip", die.die, False)
    return "Cmd executed successfully!\n", "", 0


def vnic(die: Die, args: list[str]) -> Result:
    if die.hardware != "A3":
        return NOT_ON_PRODUCT
    if args != ["-g"]:
        return UNKNOWN_OPTION
    address = die_address(die.node_dir, die.die, "vnic_address")
    if not address:
        return VNIC_FAILED
    return (f"vnic link status: {link_state(die)}\nvnic ipaddr: {address}\n"
            f"vnic netmask: {die.plan()['vnic_netmask']}\n", "", 0)


def link_state(die: Die) -> str:
    return "DOWN" if die.has("hccn_link_down") else "UP"


def link(die: Die, args: list[str]) -> Result:
    return (f"link status: {link_state(die)}\n", "", 0) if args == ["-g"] else UNKNOWN_OPTION


def net_health(die: Die, args: list[str]) -> Result:
    if args != ["-g"]:
        return UNKNOWN_OPTION
    # After `-link -s down` the docs show Fault (readiness-facts §1.3). The other two are the meanings of the
    # tool's values closest to the fault (no sample exists): no address to send from, probes never answered.
    status = ("Fault" if die.has("hccn_link_down") else "Socket fail" if die.has("hccn_no_ip")
              else "Receive timeout" if die.has("hccn_ping_loss") else "Success")
    return f"net health status: {status}\n", "", 0


def netdetect(die: Die, args: list[str]) -> Result:
    return (f"netdetect addr: {die.plan()['netdetect']}\n", "", 0) if args == ["-g"] else UNKNOWN_OPTION


def gateway(die: Die, args: list[str]) -> Result:
    if args != ["-g"]:
        return UNKNOWN_OPTION
    if not die_address(die.node_dir, die.die):
        return NO_GATEWAY  # a gateway cannot outlive the address it needs
    return f"default gateway:{die.plan()['gateway']}, Iface:eth{die.die}\n", "", 0


def _options(args: list[str], allowed: tuple[str, ...]) -> dict | None:
    if not args or args[0] != "-g" or len(args) % 2 == 0:
        return None
    options = dict(zip(args[1::2], args[2::2], strict=False))
    if set(options) - set(allowed) or "address" not in options:
        return None
    if any(not options[k].isdecimal() for k in options if k != "address"):
        return None
    return options


def _delivered(die: Die, address: str, key: str) -> bool:
    if not die_address(die.node_dir, die.die, key) or not die_reachable(die.node_dir, die.die):
        return False
    owner = address_owner(die.node_dir, address, key)
    return owner is not None and die_reachable(*owner)


def ping(die: Die, args: list[str]) -> Result:
    options = _options(args, ("address", "pkt"))
    if options is None:
        return UNKNOWN_OPTION
    try:
        ipaddress.IPv4Address(options["address"])
    except ValueError:
        return INVALID_IP
    received = _delivered(die, options["address"], "address")
    body = hccn_ping.roce_ping(die.die, options["address"], received)
    return (body, "", 0) if received else (body, "Cmd execute failed!\n", PING_INNER_ERROR)


def vnic_address_valid(address: str) -> bool:
    """The check hccn_tool makes before an HCCS ping: 192.<server>.<2+die>.<199-device> (tool_cmd.c)."""
    try:
        octets = [int(part) for part in str(ipaddress.IPv4Address(address)).split(".")]
    except ValueError:
        return False
    server, die_id, device = octets[1], octets[2] - 2, 199 - octets[3]
    return octets[0] == 192 and server < 48 and die_id in (0, 1) and 0 <= device < 32 and device % 2 == die_id


def hccs_ping(die: Die, args: list[str]) -> Result:
    if die.hardware != "A3":
        return NOT_ON_PRODUCT
    options = _options(args, ("address", "cnt", "pkt"))
    if options is None:
        return UNKNOWN_OPTION
    if not vnic_address_valid(options["address"]):
        return INVALID_IP
    received = _delivered(die, options["address"], "vnic_address")
    count = int(options.get("cnt", hccn_ping.PING_COUNT))
    # No error code for lost packets here: tool_ping_printf() only prints (unlike -ping's PING_INNER_ERROR).
    return hccn_ping.hccs_ping(die.die, options["address"], received, count), "", 0


COMMANDS = {"-ip": ip, "-vnic": vnic, "-link": link, "-net_health": net_health, "-netdetect": netdetect,
            "-gateway": gateway, "-ping": ping, "-hccs_ping": hccs_ping}


def run(node_dir: Path, argv: list[str]) -> Result:
    config = nodestate.node_config(node_dir)
    hardware = config.get("hardware", "")
    if len(argv) < 3 or argv[0] != "-i":
        return ("", 'Get invalid major cmd type. The valid major cmd type should be "-a" or "-i".\n'
                "Enter [ hccn_tool -h ] for more details.\n", 0x1001 & 0xFF)
    device = argv[1]
    dies = len(config.get("hccn", []))
    if not (device.isdecimal() and len(device) <= 2 and int(device) < dies):
        return INVALID_DEVICE
    command = COMMANDS.get(argv[2])
    if command is None:
        return "", f"simcluster: hccn_tool {argv[2]} is not simulated\n", 1
    return command(Die(node_dir, int(device), hardware), argv[3:])


def main(argv: list[str]) -> int:
    directory = nodestate.node_dir()
    if not directory or not HARDWARE[nodestate.node_config(directory).get("hardware", "")][2]:
        print("hccn_tool: no NPU on this node", file=sys.stderr)
        return 127  # what a shell says when the tool is absent
    out, err, code = run(directory, argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
