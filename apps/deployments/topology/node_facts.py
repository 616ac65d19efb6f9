"""What validation and rendering need to know about a node, as plain values (never a Django model)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeFacts:
    name: str
    address: str  # what other nodes dial, and what HCCL_IF_IP is set to
    healthy_logical_ids: frozenset[int]  # NPU die logical ids (what ASCEND_RT_VISIBLE_DEVICES counts) that are OK
    npu_count: int  # dies the hardware has, healthy or not (sizes Mooncake's ADXL port range)
    nic_name: str = "eth0"  # *_SOCKET_IFNAME: from a node field/label, eth0 when unset
    is_sim: bool = False
    die_hbm_mb: int | None = None  # HBM of one die (npu-smi's HBM total, or the hardware's); None = unknown
    # (logical id, phy id) of the dies discovery read both of; /dev/davinci<phy id> is the die's device node
    # (docs/readiness-facts.md: npu-smi's -i is the physical id). A die not listed has phy id = logical id.
    phy_ids: tuple[tuple[int, int], ...] = ()

    def phy_id(self, logical_id: int) -> int:
        return dict(self.phy_ids).get(logical_id, logical_id)
