"""Which component versions differ between the nodes of a cluster."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .values import (
    AscendVersionInfo,
    BoardInfo,
    CannInstallInfo,
    MindieVersionInfo,
    VersionMismatch,
    Versions,
)


def versions_collect(*, board: BoardInfo | None = None, driver: AscendVersionInfo | None = None,
                     firmware: AscendVersionInfo | None = None, cann: CannInstallInfo | None = None,
                     mindie: MindieVersionInfo | None = None,
                     packages: Mapping[str, str | None] | None = None) -> Versions:
    """One node's Versions from what was read there; the version.info files win over the board's fields."""
    packages = packages or {}
    return Versions(
        driver=driver.version if driver else board.software_version if board else None,
        firmware=firmware.version if firmware else board.firmware_version if board else None,
        cann=cann.version if cann else None,
        mindie=mindie.version if mindie else None,
        vllm=packages.get("vllm"),
        vllm_ascend=packages.get("vllm-ascend"),
    )


def version_mismatches(by_node: Mapping[str, Versions]) -> tuple[VersionMismatch, ...]:
    """One VersionMismatch per component with more than one value across the nodes (a node without it counts as
    a value), its groups largest first, ties in the nodes' order."""
    mismatches = []
    for component in (f.name for f in dataclasses.fields(Versions)):
        groups: dict[str | None, list[str]] = {}
        for node, versions in by_node.items():
            groups.setdefault(getattr(versions, component), []).append(node)
        if len(groups) > 1:
            ordered = sorted(groups.items(), key=lambda item: -len(item[1]))  # stable: ties keep first-seen order
            mismatches.append(VersionMismatch(component, tuple((v, tuple(nodes)) for v, nodes in ordered)))
    return tuple(mismatches)
