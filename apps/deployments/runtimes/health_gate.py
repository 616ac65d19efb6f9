"""The gates a deploy or restart passes before it goes on: every process of a stage answering its health check,
and one completion through the proxy at the end."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from apps.jobs.choices import NodeStepState
from sshexec import probe_commands as remote
from sshexec import tail_command

from ..choices import ProcessState
from ..topology import PlannedProcess, get_profile
from .run_items import item_of

if TYPE_CHECKING:
    from ..jobs.deployment_run import DeploymentRun

PROBE_ATTEMPTS_SECONDS = 20
PROGRESS_EVERY_S = 10  # how often a stage still waiting reports each starting engine's last log line
ENGINE_ROLES = ("prefill", "decode")
MARK = "@@"


def health_timeout(run: DeploymentRun, procs: list[PlannedProcess]) -> int:
    """The job's health_timeout, raised to the profile's floor when the stage starts engines (a real CPU engine takes
    45-120 s to answer, far longer under load: profiles/vllm_cpu.py)."""
    timeout = run.options.health_timeout
    if any(p.role in ENGINE_ROLES for p in procs):
        timeout = max(timeout, get_profile(run.spec.launch_profile).min_health_timeout)
    return timeout


def wait_healthy(run: DeploymentRun, procs: list[PlannedProcess]) -> None:
    timeout = health_timeout(run, procs)
    pending = {p.key: p for p in procs if p.health_url}
    if not pending:
        return
    run.ctx.step(f"waiting up to {timeout}s for {len(pending)} processes to answer their health check")
    started = time.monotonic()
    deadline = started + timeout
    next_report = started + PROGRESS_EVERY_S
    delay = 0.1
    while pending:
        run.ctx.check_cancel()
        items = [item_of(p) for p in pending.values()]
        for key, (state, pid, healthy) in run.states(items, probe=True).items():
            p = pending[key]
            if state != "running":
                detail = f"exited before it became healthy ({state}{f' pid {pid}' if pid else ''})"
                run.mark(key, ProcessState.FAILED, detail)
                run.fail(p.node, f"step 'wait healthy' failed on {p.node}: {p.key} {detail}", item=item_of(p))
            if healthy:
                del pending[key]
                run.ctx.log(f"{key} healthy ({p.health_url})", node=p.node)
                run.progress(p.node, f"{key} healthy")
        now = time.monotonic()
        if pending and now > deadline:
            first = next(iter(pending.values()))
            run.mark(first.key, ProcessState.FAILED, f"not healthy after {timeout}s")
            run.fail(first.node, f"step 'wait healthy' timed out on {first.node}: {', '.join(pending)} did "
                      f"not answer {first.health_url} within {timeout}s", item=item_of(first))
        if pending and now >= next_report:
            report_starting(run, [p for p in pending.values() if p.role in ENGINE_ROLES], int(now - started))
            next_report = now + PROGRESS_EVERY_S
        if pending:
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)


def report_starting(run: DeploymentRun, procs: list[PlannedProcess], elapsed: int) -> None:
    """`p0-dp0 starting (40 s): <the last line of its log>` for each engine still starting: one SSH command per
    node, reading the last line of each of its logs."""
    by_node: dict[str, list[PlannedProcess]] = {}
    for p in procs:
        by_node.setdefault(p.node, []).append(p)
    if not by_node:
        return
    pairs = [(node, last_lines_command(group, lambda p: run.runtime.tail_line(run, item_of(p), 1)))
             for node, group in by_node.items()]
    for (node, _), o in zip(pairs, run.fleet.run_many(pairs, timeout=15, quiet=True), strict=True):
        lines = {} if o.error else parse_last_lines(o.result.stdout)
        for p in by_node[node]:
            message = starting_line(p.key, elapsed, lines.get(p.key, ""))
            run.ctx.log(message, node=node)
            # The node's line says where it is, but no step is done: its bar must not pass 100%.
            run.ctx.node_state(node, NodeStepState.RUNNING, message[:200])


def last_lines_command(procs: list[PlannedProcess],
                       last_line: Callable[[PlannedProcess], str] | None = None) -> str:
    """For each process: a `@@<key>` marker line, then the last line of its log (nothing when it cannot be read).
    last_line: the runtime's line printing it (a container's is `docker logs --tail 1`); default its log file's."""
    def line(p: PlannedProcess) -> str:
        return last_line(p) if last_line else tail_command(p.launch.log_file, 1)

    return "; ".join(f"echo {shlex.quote(MARK + p.key)}; ( {line(p)} ) 2>/dev/null" for p in procs)


def parse_last_lines(stdout: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            key = line[len(MARK):]
            out[key] = ""
        elif key is not None and line.strip():
            out[key] = line.strip()
    return out


def starting_line(key: str, elapsed: int, last_line: str) -> str:
    return f"{key} starting ({elapsed} s): {last_line[:300] or '(nothing logged yet)'}"


def probe(run: DeploymentRun, proxy: PlannedProcess) -> str:
    model = run.spec.model.served_name
    run.ctx.step(f"probe: one /v1/completions request for {model} through the proxy", node=proxy.node)
    command = remote.completion_probe_command(address=proxy.address, port=proxy.ports[0], model=model)
    deadline = time.monotonic() + PROBE_ATTEMPTS_SECONDS
    while True:
        run.ctx.check_cancel()
        result = run.fleet.run(proxy.node, command, timeout=90)
        code, body = remote.split_http(result.stdout)
        if result.ok and code == 200:
            try:
                text = json.loads(body)["choices"][0]["text"]
            except (ValueError, KeyError, IndexError, TypeError):
                run.fail(proxy.node, f"step 'probe' on {proxy.node}: the proxy answered 200 but not a completion: "
                          f"{body[:300]}")
            run.progress(proxy.node, "probe answered")
            return text
        if time.monotonic() > deadline:
            run.fail(proxy.node, f"step 'probe' failed on {proxy.node}: HTTP {code or 'none'} "
                      f"{(body or result.stderr).strip()[:300]}", item=item_of(proxy))
        time.sleep(1)
