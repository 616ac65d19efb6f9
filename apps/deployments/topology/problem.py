"""A topology problem: the spec field it is about, what is wrong and a concrete fix (the validators' one output)."""

from __future__ import annotations

from dataclasses import dataclass

from .spec import InstanceSpec, TopologySpec


@dataclass(frozen=True)
class Problem:
    path: str  # field path in the spec, e.g. "instances[0].dp"
    message: str
    suggestion: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}. Fix: {self.suggestion}"


def instance_path(spec: TopologySpec, inst: InstanceSpec, field: str) -> str:
    """instances[<its index>].<field>: the path a Problem names for a field of one instance."""
    return f"instances[{spec.instances.index(inst)}].{field}"
