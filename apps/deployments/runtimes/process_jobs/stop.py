"""The stop job, process by process: stop every process the plan names or a row records as not stopped, proxy
first, then remove the launch files those processes read. Runs even when the revision no longer validates, and
tells which processes may still run on nodes it could not reach."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from apps.jobs.choices import NodeStepState
from apps.jobs.context import JobFailed

from ...choices import ProcessState
from ..run_items import files_by_node, item_of, item_of_row

if TYPE_CHECKING:
    from ...jobs.deployment_run import DeploymentRun


def stop(run: DeploymentRun) -> None:
    ctx = run.ctx
    items = {}
    # Every pid file the plan names (a worker that died after a start left no row, but left the pid file) ...
    for p in (run.plan.processes if run.plan else ()):
        items[p.key] = item_of(p)
    # ... and every recorded process of any revision that is not known to be stopped.
    for key, row in run.rows.items():
        if key not in items and row.state != ProcessState.STOPPED:
            items[key] = item_of_row(row)
    items = list(items.values())
    if not items:
        ctx.summary = "nothing to stop: no process recorded or planned"
        return
    files = files_by_node([run.plan, *run.recorded_plans()])  # before the stop marks the rows stopped
    steps = Counter(i.node for i in items)
    for n in steps:
        steps[n] += 1
    run.planned_steps(steps)
    reachable = []
    outcomes = run.fleet.run_many([(n, "true") for n in steps], timeout=20)
    unreachable = {o.node: o.error or "failed" for o in outcomes if not o.ok}
    for o in outcomes:
        if o.ok:
            reachable.append(o.node)
            run.progress(o.node, "connected")
        else:
            ctx.node_state(o.node, NodeStepState.FAILED, unreachable[o.node][:500])
    todo = [i for i in items if i.node in reachable]
    failures = run.stop(todo, why="stop") if todo else []
    for i in items:
        if i.node in unreachable:
            run.mark(i.key, ProcessState.UNKNOWN, f"node unreachable during stop: {unreachable[i.node]}")
    stuck = [f"{i.key} on {i.node} ({why})" for i, why in failures]
    stuck += [f"{i.key} on {i.node} (node unreachable: {unreachable[i.node]})" for i in items if i.node in unreachable]
    stopped = [n for n in reachable if not any(i.node == n for i, _ in failures)]
    # A process that did not stop may still read its files: they stay with it.
    done = {n: paths for n, paths in files.items() if n in stopped}
    left = dict(run.remove_files(done))
    for n in stopped:
        if n in left:
            ctx.node_state(n, NodeStepState.FAILED, f"stopped, but the launch files stay: {left[n]}"[:500])
        else:
            ctx.node_state(n, NodeStepState.DONE, "stopped")
    if stuck:
        raise JobFailed("could not stop, so these may still run: " + "; ".join(stuck)
                        + ". Run stop again once the nodes are reachable")
    if left:
        raise JobFailed(f"stopped all {len(items)} processes, but could not remove the launch files on "
                        + "; ".join(f"{n} ({why})" for n, why in left.items()))
    gone = sum(len(paths) for paths in done.values())
    ctx.summary = (f"stopped: {len(items)} processes checked on {len(steps)} nodes, none left running"
                   f"{f'; their {gone} launch files are gone' if gone else ''}")

