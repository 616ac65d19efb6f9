"""A run's P:D layout, read from the copy of the topology spec it stored (EvalRun.revision_spec).

The spec's own parser (apps/deployments/topology/parse.py) reads the copy first. A copy from an older spec version
that the parser refuses is read again as plain data (instances with role, tp, dp); when even that fails the layout
is unreadable, with the reason. No Django: plain data in, plain data out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from math import gcd

from apps.deployments.topology import SpecError, spec_from_dict

ROLE_LETTER = {"prefill": "P", "decode": "D"}


class LayoutUnreadable(ValueError):
    """The spec copy names no usable Prefill/Decode instances; the message says what is wrong."""


@dataclass(frozen=True, order=True)
class Shape:
    """Instances of one role with the same parallelism: count x (tp x dp NPUs each)."""

    tp: int
    dp: int
    count: int

    @property
    def npus_each(self) -> int:
        return self.tp * self.dp


@dataclass(frozen=True)
class Layout:
    prefill: tuple[Shape, ...]
    decode: tuple[Shape, ...]

    @property
    def prefill_instances(self) -> int:
        return sum(s.count for s in self.prefill)

    @property
    def decode_instances(self) -> int:
        return sum(s.count for s in self.decode)

    @property
    def prefill_npus(self) -> int:
        return sum(s.count * s.npus_each for s in self.prefill)

    @property
    def decode_npus(self) -> int:
        return sum(s.count * s.npus_each for s in self.decode)

    @property
    def total_npus(self) -> int:
        return self.prefill_npus + self.decode_npus

    @property
    def key(self) -> str:
        """e.g. "2P(tp8 dp1) : 1D(tp4 dp4)"; mixed shapes of a role are joined with "+"."""
        return f"{_role_text(self.prefill, 'P')} : {_role_text(self.decode, 'D')}"

    @property
    def ratio_instances(self) -> str:
        return ratio(self.prefill_instances, self.decode_instances)

    @property
    def ratio_npus(self) -> str:
        return ratio(self.prefill_npus, self.decode_npus)


def ratio(prefill: int, decode: int) -> str:
    """The P:D ratio in lowest terms, e.g. 32:16 -> "2:1"."""
    divisor = gcd(prefill, decode) or 1
    return f"{prefill // divisor}:{decode // divisor}"


def _role_text(shapes: tuple[Shape, ...], letter: str) -> str:
    return "+".join(f"{s.count}{letter}(tp{s.tp} dp{s.dp})" for s in shapes)


def _layout(instances: list[tuple[str, int, int]]) -> Layout:
    counts = Counter(instances)
    by_role = {role: tuple(sorted((Shape(tp, dp, n) for (r, tp, dp), n in counts.items() if r == role),
                                  key=lambda s: (-s.npus_each, -s.tp)))
               for role in ROLE_LETTER}
    missing = [role for role, shapes in by_role.items() if not shapes]
    if missing:
        raise LayoutUnreadable(f"the spec has no {' and no '.join(missing)} instance")
    return Layout(prefill=by_role["prefill"], decode=by_role["decode"])


def _positive_int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutUnreadable(f"{where}: expected a whole number of at least 1, got {value!r}")
    return value


def _plain_instances(spec) -> list[tuple[str, int, int]]:
    if not isinstance(spec, Mapping):
        raise LayoutUnreadable(f"the spec copy is not a mapping but {type(spec).__name__}")
    instances = spec.get("instances")
    if not isinstance(instances, list) or not instances:
        raise LayoutUnreadable("the spec copy has no list of instances")
    out = []
    for i, inst in enumerate(instances):
        where = f"instances[{i}]"
        if not isinstance(inst, Mapping):
            raise LayoutUnreadable(f"{where}: expected a mapping")
        role = inst.get("role")
        if role not in ROLE_LETTER:
            raise LayoutUnreadable(f"{where}.role: expected prefill or decode, got {role!r}")
        out.append((role, _positive_int(inst.get("tp"), f"{where}.tp"),
                    _positive_int(inst.get("dp", 1), f"{where}.dp")))
    return out


def layout_of(spec) -> Layout:
    """The layout of a stored spec copy; LayoutUnreadable says why there is none."""
    try:
        parsed = spec_from_dict(spec)
    except (SpecError, KeyError, TypeError, ValueError, AttributeError):
        return _layout(_plain_instances(spec))
    return _layout([(i.role, i.tp, i.dp) for i in parsed.instances])
