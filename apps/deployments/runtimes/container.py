"""The `container` runtime (a topology's `runtime: container`, docs/containers.md): the host runtime's job level and
files, with each P/D engine run as a container over SSH (container_command.py): started with `docker run` (or
`podman run`), stopped with `stop -t <grace>` then `rm`, read with one `inspect` per node, its log from `logs`. The
KV pool's master and the proxy stay host processes (topology/container_plan.py), so each of those goes to the host
runtime's own line. A container is found by its name, pdcp-<deployment>-<process key>: no pid file."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from apps.jobs.context import JobFailed

from ..topology import PlannedProcess
from ..topology.container_plan import ENGINE_ROLES
from . import container_command as cc
from . import process_jobs
from .base import States
from .container_preflight import check_containers
from .host import TAIL_LINES, HostRuntime
from .run_items import Item

if TYPE_CHECKING:
    from ..jobs.deployment_run import DeploymentRun

INSPECT_TIMEOUT = 30


class ContainerRuntime(HostRuntime):
    name = "container"

    # --- which processes are containers, and their names ---------------------------------------------------
    @staticmethod
    def in_container(role: str) -> bool:
        return role in ENGINE_ROLES

    @staticmethod
    def engine(run: DeploymentRun) -> str:
        return run.spec.container.engine if run.spec.container else "docker"

    @staticmethod
    def container(run: DeploymentRun, key: str) -> str:
        return cc.container_name(run.deployment.name, key)

    # --- job level: preflight (the rest is the host runtime's) ----------------------------------------------
    def preflight(self, run: DeploymentRun) -> None:
        """The host preflight (an engine needs the container engine on the login PATH, not `vllm`), then the
        container checks (container_preflight.py), which run even when the host's found problems."""
        host_failed = None
        try:
            process_jobs.preflight(run, binary_of=lambda p: self.engine(run) if self.in_container(p.role)
                                   else p.launch.argv[0])
        except JobFailed as exc:
            host_failed = str(exc)
        problems = check_containers(run)
        if problems:
            said = f"{len(problems)} container problems: " + "; ".join(problems)
            raise JobFailed(f"{host_failed}; and {said}" if host_failed else f"preflight found {said}")
        if host_failed:
            raise JobFailed(host_failed)
        run.ctx.summary += f"; containers: {self.engine(run)}, the image and its digest, device nodes, mounts"

    # --- process level -------------------------------------------------------------------------------------
    def start_line(self, run: DeploymentRun, p: PlannedProcess) -> str:
        if not self.in_container(p.role):
            return super().start_line(run, p)
        return cc.start_command(run.plan.container, p, deployment=run.deployment.name, revision=run.revision.number)

    def fingerprint(self, run: DeploymentRun, p: PlannedProcess) -> str:
        """Of the line without the revision label: a new revision that runs the same container keeps it."""
        if not self.in_container(p.role):
            return super().fingerprint(run, p)
        line = cc.start_command(run.plan.container, p, deployment=run.deployment.name, revision=None)
        return hashlib.sha256(line.encode()).hexdigest()

    def started(self, run: DeploymentRun, p: PlannedProcess, stdout: str) -> tuple[int | None, str]:
        if not self.in_container(p.role):
            return super().started(run, p, stdout)
        try:
            found = cc.parse_started(stdout)
        except ValueError as exc:
            raise ValueError(f"container {self.container(run, p.key)}: {exc}") from None
        return found.pid, f"container {self.container(run, p.key)} ({found.container_id[:12]}), pid {found.pid}"

    def stop_line(self, run: DeploymentRun, item: Item, grace: int) -> str:
        if not self.in_container(item.role):
            return super().stop_line(run, item, grace)
        return cc.stop_command(self.engine(run), self.container(run, item.key), grace)

    def tail_line(self, run: DeploymentRun, item: Item, lines: int = TAIL_LINES) -> str:
        if not self.in_container(item.role):
            return super().tail_line(run, item, lines)
        return cc.logs_command(self.engine(run), self.container(run, item.key), lines)

    def read_states(self, run: DeploymentRun, items: list[Item], *, probe: bool = False,
                    unreachable: dict[str, str] | None = None) -> States:
        host = [i for i in items if not self.in_container(i.role)]
        out = super().read_states(run, host, probe=probe, unreachable=unreachable) if host else {}
        by_node: dict[str, list[Item]] = {}
        for i in items:
            if self.in_container(i.role):
                by_node.setdefault(i.node, []).append(i)
        engine = self.engine(run)
        pairs = []
        for node, group in by_node.items():
            health = {self.container(run, i.key): i.health_url if probe else None for i in group}
            pairs.append((node, cc.inspect_command(engine, list(health), health)))
        for (node, group), o in zip(by_node.items(), run.fleet.run_many(pairs, timeout=INSPECT_TIMEOUT, quiet=True),
                                    strict=True):
            names = [self.container(run, i.key) for i in group]
            if o.error and unreachable is not None:
                for i in group:
                    unreachable[i.key] = o.error
                continue
            if o.error:
                run.fail(node, f"reading the state of containers {', '.join(names)} on {node} failed: {o.error}")
            try:
                states, healthy = cc.parse_inspect(o.result.stdout, names, o.result.stderr)
            except ValueError as exc:
                run.fail(node, f"reading the state of containers {', '.join(names)} on {node}: `{engine} inspect` "
                         f"answered what could not be read: {exc}")
            for i, name in zip(group, names, strict=True):
                state = states[name]
                out[i.key] = (state.text, state.pid, healthy.get(name) if probe and i.health_url else None)
        return out
