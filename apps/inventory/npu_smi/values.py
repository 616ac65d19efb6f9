"""The typed values the npu-smi parsers produce, and the error they raise; no Django import here."""

from __future__ import annotations

from dataclasses import dataclass

from ..output_errors import OutputParseError

# Values npu-smi prints for health; others are passed through (newer drivers may add some).
NPU_HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical")


def npu_smi_missing(node_name: str) -> str:
    return (f"`npu-smi` is not installed or not on PATH on {node_name} "
            "(install the Ascend driver, or add its bin directory to the login PATH)")


class NpuSmiParseError(OutputParseError):
    """`npu-smi` output in a layout we do not know."""


@dataclass(frozen=True)
class NpuDie:
    """One row pair of the `npu-smi info` summary table: a chip (910B) or one die of an A3 NPU."""

    npu_id: int
    name: str
    health: str
    power_w: float | None  # "-" on the second die of an A3 NPU: power is reported per NPU
    temp_c: int
    hugepages_used: int
    hugepages_total: int
    chip_id: int
    phy_id: int | None  # only the A3 layout has the `Chip  Phy-ID` column
    bus_id: str
    aicore_percent: int
    memory_used_mb: int
    memory_total_mb: int
    hbm_used_mb: int
    hbm_total_mb: int

    @property
    def logical_id(self) -> int:
        """The index ASCEND_RT_VISIBLE_DEVICES counts: the Phy-ID (0-15) on A3, the NPU id on 910B.

        `npu-smi info -m` (Chip Logic ID) is the authority when the two ever disagree.
        """
        return self.phy_id if self.phy_id is not None else self.npu_id


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int
    container_pid: int | None = None  # newer drivers: `Process id in container` ("NA" -> None)


@dataclass(frozen=True)
class NpuSmiInfo:
    version: str | None
    dies: tuple[NpuDie, ...]
    processes: tuple[NpuProcess, ...]
    idle_npu_ids: tuple[int, ...]  # from "No running processes found in NPU n"

    def die_by_logical_id(self, logical_id: int) -> NpuDie:
        for die in self.dies:
            if die.logical_id == logical_id:
                return die
        raise KeyError(logical_id)


@dataclass(frozen=True)
class NpuCard:
    """One card of `npu-smi info -l`."""

    npu_id: int
    product_name: str
    serial_number: str
    chip_count: int | None


@dataclass(frozen=True)
class NpuChipMapping:
    """One row of `npu-smi info -m`. Mcu rows have no logic id and are not compute devices."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    phy_id: int | None
    chip_name: str

    @property
    def is_compute(self) -> bool:
        return self.logic_id is not None
