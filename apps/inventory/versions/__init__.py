"""Parse what versions a node runs: npu-smi's board table, the driver, firmware, CANN and MindIE version files and
the Python packages (vllm, vllm-ascend); then compare them across nodes. No Django import here, no I/O: callers
pass the text they read. Strict as apps/inventory/npu_smi: an unknown layout raises VersionsParseError naming the
1-based line. Which module reads which file: docs/readiness.md.
"""

from .board import npu_smi_parse_board
from .compare import version_mismatches, versions_collect
from .files import ascend_parse_version_info, cann_parse_install_info, mindie_parse_version_info
from .packages import DEFAULT_PACKAGES, PROBE_CODE, python_packages_parse, python_packages_probe
from .values import (
    COMPONENT_LABELS,
    AscendVersionInfo,
    BoardInfo,
    CannInstallInfo,
    MindieVersionInfo,
    VersionMismatch,
    Versions,
    VersionsParseError,
)

__all__ = [
    "COMPONENT_LABELS",
    "DEFAULT_PACKAGES",
    "PROBE_CODE",
    "AscendVersionInfo",
    "BoardInfo",
    "CannInstallInfo",
    "MindieVersionInfo",
    "VersionMismatch",
    "Versions",
    "VersionsParseError",
    "ascend_parse_version_info",
    "cann_parse_install_info",
    "mindie_parse_version_info",
    "npu_smi_parse_board",
    "python_packages_parse",
    "python_packages_probe",
    "version_mismatches",
    "versions_collect",
]
