"""The deploy job, process by process: reconcile the nodes with the revision's plan. Stops recorded processes the
plan no longer has, keeps those that already run with the same command, replaces changed ones, starts the rest stage
by stage with a health gate, then sends one completion through the proxy."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ...choices import ProcessState
from ...topology import PlannedProcess, Stage
from ..health_gate import probe, wait_healthy
from ..run_items import Item, files_by_node, item_of, item_of_row

if TYPE_CHECKING:
    from ...jobs.deployment_run import DeploymentRun


def deploy(run: DeploymentRun) -> None:
    ctx, plan = run.ctx, run.plan
    planned = {p.key: p for p in plan.processes}
    unwanted = [item_of_row(r) for k, r in run.rows.items()
                if k not in planned and r.state != ProcessState.STOPPED]
    proxy = next(p for p in plan.processes if p.role == "proxy")
    steps = _steps(run, unwanted, proxy)
    run.planned_steps(steps)
    run.connect(list(steps))
    ctx.check_cancel()

    earlier = files_by_node(run.recorded_plans())  # before the rows are rewritten for this revision
    ctx.step(f"reading the state of {len(planned)} planned and {len(unwanted)} no longer wanted processes")
    actual = run.states([item_of(p) for p in plan.processes] + unwanted)
    gone = _stop_unwanted(run, unwanted, actual)
    kept, replaced = [], []
    for stage in plan.stages:
        ctx.check_cancel()
        _reconcile_stage(run, stage, actual, kept, replaced)
    answer = probe(run, proxy)
    ctx.log(f"probe answer: {answer!r}", node=proxy.node)
    # Files an earlier revision's processes read that this plan no longer names: nothing of it runs any more.
    current = files_by_node([plan])
    run.remove_files({n: paths - current.get(n, set()) for n, paths in earlier.items()})
    run.done(steps)
    ctx.summary = (f"r{run.revision.number} deployed: {len(planned)} processes ({len(run.started)} started"
                   f"{f', {len(replaced)} replaced' if replaced else ''}, {len(kept)} kept"
                   f"{f', {len(gone)} stopped' if gone else ''}); the proxy answered a completion: {answer!r}")


def _steps(run: DeploymentRun, unwanted: list[Item], proxy: PlannedProcess) -> Counter:
    """Steps per node, for progress: connect, start (+ health) per process, stop per unwanted one, the probe."""
    steps = Counter()
    for p in run.plan.processes:
        steps[p.node] += 2 if p.health_url else 1
    for i in unwanted:
        steps[i.node] += 1
    steps[proxy.node] += 1
    for n in steps:
        steps[n] += 1  # connect
    return steps


def _stop_unwanted(run: DeploymentRun, unwanted: list[Item], actual: dict) -> list[Item]:
    """Stops the recorded processes the plan no longer has that still run; returns those."""
    gone = [i for i in unwanted if actual[i.key][0] == "running"]
    for i in unwanted:
        if i not in gone:
            run.mark(i.key, ProcessState.STOPPED, "not running when the deploy looked")
            run.progress(i.node, f"{i.key} already stopped")
    if gone:
        failures = run.stop(gone, why=f"not in revision r{run.revision.number}")
        if failures:
            i, why = failures[0]
            run.fail(i.node, f"step 'stop unwanted {i.key}' failed on {i.node}: {why}")
    return gone


def _reconcile_stage(run: DeploymentRun, stage: Stage, actual: dict, kept: list[str], replaced: list[str]) -> None:
    """Keeps what runs with the planned command, replaces what runs with another, starts the rest; then waits for
    the whole stage to be healthy."""
    to_start, to_replace = [], []
    for p in stage.processes:
        state, pid, _ = actual[p.key]
        row = run.rows.get(p.key)
        if state == "running" and row and row.fingerprint == run.runtime.fingerprint(run, p):
            kept.append(p.key)
            run.ctx.log(f"{p.key} already runs as wanted (pid {pid}): kept", node=p.node)
            if row.state != ProcessState.RUNNING:
                run.record(p, pid, ProcessState.RUNNING)
            run.progress(p.node, f"kept {p.key}")
        elif state == "running":
            to_replace.append(p)
        else:
            to_start.append(p)
    if to_replace:
        replaced += [p.key for p in to_replace]
        failures = run.stop([item_of(p) for p in to_replace], why="its command changed")
        if failures:
            i, why = failures[0]
            run.fail(i.node, f"step 'stop {i.key}' failed on {i.node}: {why}")
    run.ctx.step(f"stage {stage.name}: starting {len(to_start) + len(to_replace)}, keeping "
                 f"{len(stage.processes) - len(to_start) - len(to_replace)}")
    run.start(to_start + to_replace)
    run.ctx.check_cancel()
    wait_healthy(run, list(stage.processes))
