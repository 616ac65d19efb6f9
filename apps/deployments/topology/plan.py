"""A rendered deployment: ordered stages of processes, each with its exact launch values, and its text form."""

from __future__ import annotations

from dataclasses import dataclass

from sshexec import LaunchSpec, detached_start_command

STAGE_ORDER = ("kv_pool", "engines", "proxy")  # dependencies first: D/P need the pool, the proxy needs P/D


@dataclass(frozen=True)
class PlannedProcess:
    key: str  # unique in the plan, safe as a file name: "p0-dp1", "store-0", "kv-pool", "proxy"
    role: str  # store | kv_pool | prefill | decode | proxy
    instance: str | None
    node: str
    address: str
    dp_rank: int | None  # first global DP rank the process hosts (P/D only)
    launch: LaunchSpec
    health_url: str | None  # http://... answers 200 when ready; tcp://host:port is ready when it accepts
    ports: tuple[int, ...]  # TCP ports the process listens on (kv window not included)
    kv_port_window: tuple[int, int] | None  # first and last side-channel port, inclusive


@dataclass(frozen=True)
class Stage:
    name: str
    processes: tuple[PlannedProcess, ...]


@dataclass(frozen=True)
class Plan:
    profile: str
    stages: tuple[Stage, ...]
    warnings: tuple[str, ...] = ()  # renders, but may not mean what was written (topology/engine_rules.env_warnings)

    @property
    def processes(self) -> tuple[PlannedProcess, ...]:
        return tuple(p for s in self.stages for p in s.processes)


def plan_to_text(plan: Plan) -> str:
    """What the operator reads before anything runs: per stage, per node, the exact shell line."""
    lines = [f"# launch profile: {plan.profile}; {len(plan.processes)} processes in {len(plan.stages)} stages"]
    for n, stage in enumerate(plan.stages, 1):
        lines.append(f"\n## stage {n}: {stage.name}")
        for node in dict.fromkeys(p.node for p in stage.processes):
            procs = [p for p in stage.processes if p.node == node]
            lines.append(f"### {node} ({procs[0].address})")
            for p in procs:
                window = f" kv {p.kv_port_window[0]}-{p.kv_port_window[1]}" if p.kv_port_window else ""
                lines.append(f"# {p.key}: ports {', '.join(map(str, p.ports))}{window}; health {p.health_url}")
                lines.append(detached_start_command(p.launch))
    return "\n".join(lines) + "\n"
