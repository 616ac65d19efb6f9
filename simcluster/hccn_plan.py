"""The NPU network addresses of a simulated node (what `hccn_tool` answers and /etc/hccn.conf holds), and where a
ping finds the die that owns an address.

Plan for die (physical id) i of the node at position k of the spec (node0 = 0):
  RoCE NIC   10.20.i.(k+1)/24, gateway and netdetect 10.20.i.254: each die index has its own subnet across the
             nodes, as the usual `for i in {0..15}` setup scripts number them.
  A3 vNIC    192.k.(2 + i%2).(199 - i)/16: the layout hccn_tool itself decodes an HCCS ping address with
             (hicann/driver dcmi_network_intf.h: "[192].[server_id].[2+die_id].[199-device_id]", server_id < 48).
`up` writes the plan into node.json ("hccn", a list indexed by physical id); `hccn_tool -ip -s` rewrites an
entry there, as the real tool persists address_N/netmask_N into /etc/hccn.conf.
"""

from __future__ import annotations

from pathlib import Path

from simcluster import nodestate

SUBNET_MASK = "255.255.255.0"
VNIC_MASK = "255.255.0.0"  # no capture of `-vnic -g` exists (docs/readiness-facts.md §1.2): a guess
MAX_SERVERS = 48  # A3_SUPERPOD_MAX_NUMS: a vNIC address with a higher server id fails hccn_tool's check


def hccn_plan(server_index: int, dies: int, vnic: bool) -> list[dict]:
    if not 0 <= server_index < min(MAX_SERVERS, 253):
        raise ValueError(f"node position {server_index}: the NPU address plan covers positions 0-47")
    plan = []
    for die in range(dies):
        entry = {"address": f"10.20.{die}.{server_index + 1}", "netmask": SUBNET_MASK,
                 "gateway": f"10.20.{die}.254", "netdetect": f"10.20.{die}.254"}
        if vnic:
            entry |= {"vnic_address": f"192.{server_index}.{2 + die % 2}.{199 - die}", "vnic_netmask": VNIC_MASK}
        plan.append(entry)
    return plan


def render_hccn_conf(plan: list[dict]) -> str:
    """/etc/hccn.conf: `<key>_<physical id>=value` lines (docs/readiness-facts.md §2, the order of its capture)."""
    lines = []
    for die, entry in enumerate(plan):
        lines += [f"{key}_{die}={entry[key]}" for key in ("address", "netmask", "netdetect", "gateway") if entry.get(key)]
    return "\n".join(lines) + "\n"


def cluster_node_dirs(node_dir: Path) -> list[Path]:
    """This node's dir and its siblings' (the nodes of one cluster share <state-dir>/nodes/)."""
    return sorted(p.parent for p in node_dir.parent.glob("*/node.json"))


def die_address(node_dir: Path, die: int, key: str = "address") -> str | None:
    """The die's live address, or None when it has none (no plan entry, or the hccn-no-ip fault)."""
    plan = nodestate.node_config(node_dir).get("hccn", [])
    if die >= len(plan) or die in nodestate.faults(node_dir).get("hccn_no_ip", []):
        return None
    return plan[die].get(key)


def address_owner(node_dir: Path, address: str, key: str = "address") -> tuple[Path, int] | None:
    """The (node dir, die) that holds `address` anywhere in the cluster."""
    for ndir in cluster_node_dirs(node_dir):
        for die in range(len(nodestate.node_config(ndir).get("hccn", []))):
            if die_address(ndir, die, key) == address:
                return ndir, die
    return None


def die_reachable(node_dir: Path, die: int) -> bool:
    """Whether packets leave and reach this die: link UP and no ping-loss fault."""
    current = nodestate.faults(node_dir)
    return die not in current.get("hccn_link_down", []) and die not in current.get("hccn_ping_loss", [])
