"""A rendered deployment: ordered stages of processes, each with its exact launch values, and its text form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from sshexec import LaunchSpec

from .allowlist import AllowedMount
from .hbm_fit import DieFit
from .plan_view import plan_view  # it names this module's types only in annotations

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
class MindiePlan:
    """launch_profile mindie: Kubernetes starts the pods, the deploy host's scripts start Kubernetes (docs/mindie.md).
    The plan's processes are the pods it expects, for the picture; this says what a job runs."""

    deploy_host: str
    address: str
    scripts_dir: str
    job_id: str
    user_config_path: PurePosixPath
    user_config: str  # the JSON text written there
    deploy: str  # the shell lines, in order
    ready: str
    pods: str
    delete: str
    ready_timeout_s: int


@dataclass(frozen=True)
class ContainerPlan:
    """runtime: container (topology/container_plan.py): what every engine container is started with; the
    `docker run` line itself is the container runtime's (apps/deployments/runtimes/container_command.py), which adds
    the deployment's name and revision."""

    engine: str  # docker | podman
    image: str  # pinned: <reference>@<digest> where a digest is known
    shm_size: str
    mounts: tuple[AllowedMount, ...]  # from the cluster's allowlist, in the topology's order
    dies: tuple[tuple[str, tuple[int, ...]], ...]  # process key -> its dies' phy ids (/dev/davinci<id>), engines only

    def runs(self, key: str) -> bool:
        """Whether the process of this key runs in a container (the engines) or on the host (pool, proxy)."""
        return any(k == key for k, _ in self.dies)

    def dies_of(self, key: str) -> tuple[int, ...]:
        return next(ids for k, ids in self.dies if k == key)


@dataclass(frozen=True)
class Plan:
    profile: str
    stages: tuple[Stage, ...]
    warnings: tuple[str, ...] = ()  # renders, but may not mean what was written (topology/plan_warnings.py)
    hbm: tuple[DieFit, ...] = ()  # each instance's HBM per die (topology/hbm_fit.py), set by build_plan
    mindie: MindiePlan | None = None
    container: ContainerPlan | None = None  # runtime: container

    @property
    def processes(self) -> tuple[PlannedProcess, ...]:
        return tuple(p for s in self.stages for p in s.processes)


def plan_to_text(plan: Plan, start_lines: Mapping[str, str] | None = None) -> str:
    """What the operator reads before anything runs: per stage, per node, each process as the docs write it (files,
    exports, the program with one flag per line: plan_view) and then the exact line a deploy sends, with the wrapper
    (run-dir checks, pid file, log, setsid) the docs leave out."""
    if plan.mindie:
        return mindie_plan_text(plan)
    lines = [f"# launch profile: {plan.profile}; {len(plan.processes)} processes in {len(plan.stages)} stages"]
    if plan.hbm:
        lines.append("# HBM per die (docs/hbm-fit.md):")
        lines += [f"#   {fit.as_dict()['text']}" for fit in plan.hbm]
    for stage in plan_view(plan, start_lines):
        lines.append(f"\n## stage {stage.number}: {stage.name}")
        for node in stage.nodes:
            lines.append(f"### {node.node} ({node.address})")
            for p in node.processes:
                window = f" kv {p.kv_port_window[0]}-{p.kv_port_window[1]}" if p.kv_port_window else ""
                lines.append(f"# {p.key}: ports {', '.join(map(str, p.ports))}{window}; health {p.health_url}")
                lines.append(p.text)
                how = "as a container" if p.in_container else "(run-dir checks, pid file, log, setsid)"
                lines.append(f"# {p.key} exactly as a deploy starts it {how}:")
                lines.append(p.start_line)
    return "\n".join(lines) + "\n"


def mindie_plan_text(plan: Plan) -> str:
    """What a MindIE deploy does on its deploy host, the file it writes, and the pods Kubernetes should run."""
    m = plan.mindie
    lines = [f"# launch profile: mindie; {len(plan.processes)} pods expected; everything runs through "
             f"{m.deploy_host} ({m.address}), Kubernetes namespace {m.job_id}"]
    if plan.hbm:
        lines.append("# HBM per die (docs/hbm-fit.md):")
        lines += [f"#   {fit.as_dict()['text']}" for fit in plan.hbm]
    lines += [f"\n## 1. write {m.user_config_path} on {m.deploy_host}", m.user_config.rstrip(),
              "\n## 2. deploy (output streamed into the job)", m.deploy,
              f"\n## 3. wait up to {m.ready_timeout_s} s for the coordinator's ready line", m.ready,
              "\n## 4. read where Kubernetes placed the pods", m.pods,
              "\n## stop", m.delete, "\n## pods expected (node: pod, devices)"]
    for p in plan.processes:
        devices = p.launch.env.get("ASCEND_RT_VISIBLE_DEVICES", "")
        lines.append(f"# {p.node} ({p.address}): {p.key} {p.role}{f' devices {devices}' if devices else ''}")
    return "\n".join(lines) + "\n"
