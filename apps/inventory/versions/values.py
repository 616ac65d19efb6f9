"""The typed values the version parsers produce, and the error they raise."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..output_errors import OutputParseError


class VersionsParseError(OutputParseError):
    """A version file, npu-smi's board table or the package probe in a layout we do not know."""


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class BoardInfo:
    """`npu-smi info -t board -i N`. Fields other than these are kept in `fields` under npu-smi's own names."""

    npu_id: int
    software_version: str  # the driver package version
    firmware_version: str
    compatibility: str | None = None  # `OK` when driver and firmware match
    board_id: str | None = None
    product_name: str | None = None  # drivers >= 25.x only
    serial_number: str | None = None  # drivers >= 25.x only
    fields: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class AscendVersionInfo:
    """/usr/local/Ascend/driver/version.info or /usr/local/Ascend/firmware/version.info."""

    version: str
    package_version: str | None = None  # absent in some 24.1 builds
    inner_version: str | None = None  # `Innerversion=` (driver only)
    fields: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class CannInstallInfo:
    """The CANN toolkit's ascend_toolkit_install.info."""

    version: str
    arch: str
    inner_version: str | None = None
    path: str | None = None
    fields: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class MindieVersionInfo:
    """/usr/local/Ascend/mindie/latest/version.info."""

    version: str  # from `Ascend-mindie : MindIE <version>`
    components: Mapping[str, str] = field(default_factory=_empty)  # mindie-rt, mindie-llm, ... -> version
    platform: str | None = None


@dataclass(frozen=True)
class Versions:
    """What one node runs; None = not found there."""

    driver: str | None = None
    firmware: str | None = None
    cann: str | None = None
    mindie: str | None = None
    vllm: str | None = None
    vllm_ascend: str | None = None


COMPONENT_LABELS = MappingProxyType({"driver": "driver", "firmware": "firmware", "cann": "CANN", "mindie": "MindIE",
                                     "vllm": "vLLM", "vllm_ascend": "vllm-ascend"})


@dataclass(frozen=True)
class VersionMismatch:
    """One component whose version differs between nodes: `groups` = (version or None, nodes), largest first."""

    component: str
    groups: tuple[tuple[str | None, tuple[str, ...]], ...]

    @property
    def message(self) -> str:
        parts = [f"{version if version is not None else 'none found'} on {', '.join(nodes)}"
                 for version, nodes in self.groups]
        return f"{COMPONENT_LABELS[self.component]} {'; '.join(parts)}"
