"""What the deployment jobs act on: by pid file, a planned process or a recorded one the plan no longer has; and the
launch files plans name, per node."""

from __future__ import annotations

from dataclasses import dataclass

from ..choices import ROLE_ORDER
from ..models import Process
from ..topology import PlannedProcess


@dataclass
class Item:
    """Something to act on by pid file: a planned process, or a recorded one the plan no longer has."""

    key: str
    node: str
    role: str
    pid_file: str
    log_path: str
    health_url: str | None = None


def item_of(p: PlannedProcess) -> Item:
    return Item(p.key, p.node, p.role, str(p.launch.pid_file), str(p.launch.log_file), p.health_url)


def item_of_row(row: Process) -> Item:
    return Item(row.key, row.node_name, row.role, row.pid_file, row.log_path, row.health_url or None)


def stage_rank(role: str) -> int:
    return ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)


def files_by_node(plans) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for plan in plans:
        for p in plan.processes if plan else ():
            for f in p.launch.files:
                out.setdefault(p.node, set()).add(str(f.path))
    return out
