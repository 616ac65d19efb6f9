"""Parse real `npu-smi` output (910B/A2 and A3 layouts) into typed values; no Django import here.

Every parser is strict: output it does not recognise raises NpuSmiParseError naming the line and what
was expected, because a silently half-parsed table would put wrong NPU ids into the inventory.
"""

from .info_table import npu_smi_parse_info, npu_smi_parse_processes
from .key_values import npu_smi_parse_health, npu_smi_parse_list, npu_smi_parse_map
from .values import (
    NPU_HEALTH_VALUES,
    NpuCard,
    NpuChipMapping,
    NpuDie,
    NpuProcess,
    NpuSmiInfo,
    NpuSmiParseError,
    npu_smi_missing,
)

__all__ = [
    "NPU_HEALTH_VALUES",
    "NpuCard",
    "NpuChipMapping",
    "NpuDie",
    "NpuProcess",
    "NpuSmiInfo",
    "NpuSmiParseError",
    "npu_smi_missing",
    "npu_smi_parse_health",
    "npu_smi_parse_info",
    "npu_smi_parse_list",
    "npu_smi_parse_map",
    "npu_smi_parse_processes",
]
