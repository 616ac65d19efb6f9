"""The refresh job ("Read state from nodes"): reads each recorded process's pid file on its node, and each planned
one's that has no row (a worker that died right after a start left the pid file but no row), and makes the Process
rows say what it found: running with its pid, stopped, or unknown with the reason when the node cannot be asked.
It starts and stops nothing. Queued by itself when a deploy, stop or restart loses its worker
(services.refresh_after_lost_worker), or by an operator."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from apps.jobs.choices import NodeStepState
from apps.jobs.context import JobFailed

from ...choices import ProcessState
from ..run_items import Item, item_of, item_of_row

if TYPE_CHECKING:
    from ...jobs.deployment_run import DeploymentRun

_EXIT_CODE = re.compile(r"\(exit code (\d+)\)")


def refresh(run: DeploymentRun) -> None:
    ctx = run.ctx
    planned = {p.key: p for p in (run.plan.processes if run.plan else ())}
    items = [item_of_row(r) for r in run.rows.values()]
    items += [item_of(p) for key, p in planned.items() if key not in run.rows]
    if not items:
        ctx.summary = "nothing to read: no process recorded or planned"
        return
    nodes = Counter(i.node for i in items)
    run.planned_steps(nodes)
    ctx.step(f"reading the state of {len(items)} processes on {len(nodes)} nodes: {', '.join(nodes)}")
    unreachable: dict[str, str] = {}
    actual = run.states(items, unreachable=unreachable)
    found, changed = Counter(), 0
    for item in items:
        before = _said(run, item.key)
        if item.key in unreachable:
            found["unknown"] += 1
            _unknown(run, item, unreachable[item.key])
        else:
            state, pid, _ = actual[item.key]
            found["running" if state == "running" else "not running"] += 1
            _read(run, item, state, pid, planned)
        changed += before != _said(run, item.key)
        if item.key not in unreachable:
            run.progress(item.node, f"read {item.key}")
    bad = {i.node: unreachable[i.key] for i in items if i.key in unreachable}
    for node in nodes:
        if node in bad:
            ctx.node_state(node, NodeStepState.FAILED, f"unreachable: {bad[node]}"[:500])
        else:
            ctx.node_state(node, NodeStepState.DONE, "read")
    counts = ", ".join(f"{n} {what}" for what, n in found.items())
    if bad:
        raise JobFailed(f"read {len(items)} processes ({counts}; {changed} rows changed), but these nodes could not "
                        "be asked, so their processes' state is unknown: "
                        + "; ".join(f"{n} ({why})" for n, why in bad.items()) + ". Read again once they answer")
    ctx.summary = f"read {len(items)} processes on {len(nodes)} nodes: {counts}; {changed} rows changed"


def _read(run: DeploymentRun, item: Item, state: str, pid: int | None, planned: dict) -> None:
    row = run.rows.get(item.key)
    job = f"read back by job #{run.ctx.job.pk}"
    if state == "running":
        if row is not None:
            was = f" (the row said {row.state}{f', pid {row.pid}' if row.pid != pid else ''})" \
                if row.state != ProcessState.RUNNING or row.pid != pid else ""
            run.mark(item.key, ProcessState.RUNNING, f"running, pid {pid}: {job}", pid=pid)
            run.ctx.log(f"{item.key}: running, pid {pid}{was}", node=item.node)
        else:
            run.record(planned[item.key], pid, ProcessState.RUNNING,
                       f"found running, pid {pid}, with no row (its job was lost): {job}")
            run.ctx.log(f"{item.key}: running, pid {pid}, and no row recorded it: recorded now", node=item.node,
                        stream="stderr")
        return
    what = f"{state}{f' {pid}' if pid else ''}"
    if row is None:
        run.ctx.log(f"{item.key}: planned, not running ({what})", node=item.node)
    elif row.state in (ProcessState.RUNNING, ProcessState.UNKNOWN) and _died(state):
        run.ctx.log(f"{item.key}: not running ({what}); the row said {row.state}: now failed", node=item.node,
                    stream="stderr")
        run.mark(item.key, ProcessState.FAILED, f"{what} when read back: {job}")
    elif row.state in (ProcessState.RUNNING, ProcessState.UNKNOWN):
        run.ctx.log(f"{item.key}: not running ({what}); the row said {row.state}: now stopped", node=item.node,
                    stream="stderr")
        run.mark(item.key, ProcessState.STOPPED, f"not running when read back ({what}): {job}")
    else:
        run.ctx.log(f"{item.key}: not running ({what}), as its row says ({row.state})", node=item.node)


def _died(state: str) -> bool:
    """A state that names a non-zero exit code: a container that ended on its own (container_command.ContainerState;
    a container this control plane stopped is removed with it). A host process's state never names one."""
    code = _EXIT_CODE.search(state)
    return bool(code) and code.group(1) != "0"


def _unknown(run: DeploymentRun, item: Item, why: str) -> None:
    run.ctx.log(f"{item.key}: cannot read its state: {why}", node=item.node, stream="error")
    row = run.rows.get(item.key)
    if row is not None and row.state != ProcessState.STOPPED:
        run.mark(item.key, ProcessState.UNKNOWN, f"node {item.node} unreachable when read back: {why}")


def _said(run: DeploymentRun, key: str) -> tuple | None:
    row = run.rows.get(key)
    return (row.state, row.pid) if row else None
