"""Job handlers: preflight, deploy (reconciling), stop, restart one instance, rolling restart of a role.

Order (plan stages): store -> kv_pool -> engines (Prefill and Decode together) -> proxy; stop walks it backwards.
Every job re-reads each process's pid file on its node before acting, so the Process rows are a record, never the
truth. A failed or canceled deploy stops what it started itself unless params.keep_on_failure.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass

from django.utils import timezone

from apps.jobs.choices import JobKind, NodeStepState
from apps.jobs.context import JobCanceled, JobContext, JobFailed
from apps.jobs.registry import job_handler
from apps.jobs.ssh import stop_command, tail_command

from . import remote
from .choices import ROLE_ORDER, ProcessState
from .executor import Fleet, NodeFailure
from .facts import cluster_nodes
from .models import Deployment, Process, Revision
from .planning import admin_header_path, admin_token_path, fingerprint, render_plan, revision_spec, start_line
from .topology import PlannedProcess
from .validation import RevisionInvalid

START_TIMEOUT = 30
TAIL_LINES = 15
PROBE_ATTEMPTS_SECONDS = 20


@dataclass
class Item:
    """Something to act on by pid file: a planned process, or a recorded one the plan no longer has."""

    key: str
    node: str
    role: str
    pid_file: str
    log_path: str
    health_url: str | None = None
    planned: PlannedProcess | None = None


def item_of(p: PlannedProcess) -> Item:
    return Item(p.key, p.node, p.role, str(p.launch.pid_file), str(p.launch.log_file), p.health_url, p)


def item_of_row(row: Process) -> Item:
    return Item(row.key, row.node_name, row.role, row.pid_file, row.log_path, row.health_url or None)


def stage_rank(role: str) -> int:
    return ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)


class DeploymentRun:
    def __init__(self, ctx: JobContext, *, strict: bool = True):
        self.ctx = ctx
        self.params = ctx.job.params
        self.deployment = Deployment.objects.select_related("cluster").get(pk=ctx.job.target_id)
        self.revision = Revision.objects.filter(pk=self.params.get("revision")).first()
        if self.revision is None:
            raise JobFailed("the revision this job was started for no longer exists")
        self.spec = revision_spec(self.revision)
        self.plan = None
        try:
            self.plan = render_plan(self.spec, self.deployment.cluster, deployment_id=self.deployment.pk)
        except RevisionInvalid as exc:
            text = "; ".join(map(str, exc.problems))
            if strict:
                raise JobFailed(f"revision r{self.revision.number} does not validate against the inventory now: "
                                f"{text}") from None
            ctx.log(f"revision r{self.revision.number} does not validate now ({text}); acting on the recorded "
                    "processes only", stream="stderr")
        self.nodes = cluster_nodes(self.deployment.cluster)
        self.fleet = Fleet(ctx, self.nodes, max_parallel=self.params.get("max_parallel", 8))
        self.rows = {r.key: r for r in self.deployment.processes.all()}
        self.started: list[PlannedProcess] = []
        self.keep = bool(self.params.get("keep_on_failure"))
        self.failed_nodes: set[str] = set()

    # --- progress ----------------------------------------------------------------------------------------
    def planned_steps(self, steps: Counter) -> None:
        self.ctx.nodes_planned(dict(steps))

    def progress(self, node: str, message: str) -> None:
        self.ctx.node_state(node, NodeStepState.RUNNING, message, step_done=True)

    def fail(self, node: str, message: str, *, item: Item | None = None) -> None:
        tail = self.tail(item) if item else ""
        self.failed_nodes.add(node)
        self.ctx.node_state(node, NodeStepState.FAILED, message[:500])
        if tail:
            message += f"\nlast log lines of {item.key} ({item.log_path} on {node}):\n{tail}"
        raise JobFailed(message)

    def tail(self, item: Item) -> str:
        try:
            result = self.fleet.run(item.node, tail_command(item.log_path, TAIL_LINES), timeout=15)
        except NodeFailure as exc:
            return f"(could not read the log: {exc})"
        text = (result.stdout or result.stderr).rstrip()
        for line in text.splitlines():
            self.ctx.log(line, node=item.node, stream="stderr")
        return text

    # --- nodes -------------------------------------------------------------------------------------------
    def connect(self, names: list[str]) -> None:
        names = list(dict.fromkeys(names))
        self.ctx.step(f"connecting to {len(names)} nodes: {', '.join(names)}")
        outcomes = self.fleet.run_many([(n, "true") for n in names], timeout=20)
        bad = [o for o in outcomes if o.error or not o.ok]
        for o in bad:
            self.ctx.node_state(o.node, NodeStepState.FAILED, (o.error or "`true` failed")[:500])
        for o in outcomes:
            if o not in bad:
                self.progress(o.node, "connected")
        if bad:
            raise JobFailed("connect failed before anything was started or stopped: "
                            + "; ".join(f"{o.node}: {o.error or 'true exited non-zero'}" for o in bad))

    # --- reading state -----------------------------------------------------------------------------------
    def states(self, items: list[Item], *, probe: bool = False) -> dict[str, tuple[str, int | None, bool | None]]:
        pairs = [(i.node, remote.check_command(i.pid_file, i.health_url if probe else None)) for i in items]
        out = {}
        for item, o in zip(items, self.fleet.run_many(pairs, timeout=20, quiet=True), strict=True):
            if o.error:
                self.fail(item.node, f"reading the state of {item.key} on {item.node} failed: {o.error}")
            try:
                out[item.key] = remote.parse_check(o.result.stdout)
            except ValueError as exc:
                self.fail(item.node, f"reading the state of {item.key} on {item.node}: {exc}")
        return out

    # --- start / stop ------------------------------------------------------------------------------------
    def record(self, p: PlannedProcess, pid: int | None, state: ProcessState, detail: str = "") -> Process:
        now = timezone.now()
        node = self.nodes.get(p.node)
        defaults = dict(revision=self.revision, node=node, node_name=p.node, role=p.role, instance=p.instance or "",
                        address=p.address, ports=list(p.ports), health_url=p.health_url or "", pid=pid,
                        command=start_line(p), fingerprint=fingerprint(p), log_path=str(p.launch.log_file),
                        pid_file=str(p.launch.pid_file), state=state, state_detail=detail, last_job=self.ctx.job)
        if state == ProcessState.RUNNING:
            defaults.update(started_at=now, stopped_at=None)
        row, _ = Process.objects.update_or_create(deployment=self.deployment, key=p.key, defaults=defaults)
        self.rows[p.key] = row
        return row

    def mark(self, key: str, state: ProcessState, detail: str = "") -> None:
        row = self.rows.get(key)
        if row is None:
            return
        row.state, row.state_detail, row.last_job = state, detail[:2000], self.ctx.job
        if state == ProcessState.STOPPED:
            row.stopped_at = timezone.now()
        row.save(update_fields=["state", "state_detail", "last_job", "stopped_at", "updated"])

    def start(self, procs: list[PlannedProcess]) -> None:
        if not procs:
            return
        if any(p.role == "proxy" for p in procs):
            self.write_admin_token(next(p for p in procs if p.role == "proxy").node)
        for p in procs:
            self.ctx.step(f"start {p.key} ({p.role}) on {p.node}: {' '.join(p.launch.argv[:3])} ...", node=p.node)
        outcomes = self.fleet.run_many([(p.node, start_line(p)) for p in procs], timeout=START_TIMEOUT)
        failed = None
        for p, o in zip(procs, outcomes, strict=True):
            if o.ok:
                last = (o.result.stdout.strip().splitlines() or [""])[-1]
                pid = int(last) if last.isdigit() else None
                self.started.append(p)
                self.record(p, pid, ProcessState.RUNNING)
                self.ctx.log(f"{p.key} started, pid {pid}", node=p.node)
                self.progress(p.node, f"started {p.key}")
            elif failed is None:
                why = o.error or f"exit {o.result.exit_status}: {o.result.stderr.strip()[-500:]}"
                failed = (p, why)
        if failed:
            p, why = failed
            self.record(p, None, ProcessState.FAILED, why)
            self.fail(p.node, f"step 'start {p.key}' failed on {p.node}: {why}", item=item_of(p))

    def write_admin_token(self, node: str) -> None:
        token = self.deployment.proxy_admin_token
        secrets_dir = str(admin_token_path(self.spec).parent)
        result = self.fleet.run(node, f"umask 077; mkdir -p -- {remote.q(secrets_dir)}", timeout=15)
        if not result.ok:
            self.fail(node, f"cannot create {secrets_dir} on {node}: {result.stderr.strip()}")
        self.fleet.put_text(node, str(admin_token_path(self.spec)), token + "\n", mode=0o600)
        self.fleet.put_text(node, str(admin_header_path(self.spec)), f"Authorization: Bearer {token}\n", mode=0o600)

    def stop(self, items: list[Item], *, why: str, progress: bool = True) -> list[tuple[Item, str]]:
        """Stops items stage by stage, backwards (proxy first). Returns (item, reason) for those it could not stop."""
        grace = self.params.get("stop_grace", 10)
        failures = []
        for rank in sorted({stage_rank(i.role) for i in items}, reverse=True):
            group = [i for i in items if stage_rank(i.role) == rank]
            for i in group:
                self.ctx.step(f"stop {i.key} on {i.node} ({why})", node=i.node)
            outcomes = self.fleet.run_many([(i.node, stop_command(i.pid_file, grace)) for i in group],
                                           timeout=grace + 20)
            for i, o in zip(group, outcomes, strict=True):
                if o.ok:
                    said = o.result.stdout.strip() or "stopped"
                    self.ctx.log(f"{i.key}: {said}", node=i.node)
                    self.mark(i.key, ProcessState.STOPPED, said)
                    if progress:
                        self.progress(i.node, f"stopped {i.key}")
                else:
                    reason = o.error or (o.result.stderr.strip() or f"exit {o.result.exit_status}")
                    self.mark(i.key, ProcessState.UNKNOWN, f"stop failed: {reason}")
                    failures.append((i, reason))
        return failures

    def cleanup_started(self, reason: str) -> None:
        if not self.started:
            return
        keys = ", ".join(p.key for p in self.started)
        if self.keep:
            self.ctx.log(f"keep_on_failure: leaving what this job started running for debugging: {keys}",
                         stream="stderr")
            return
        self.ctx.step(f"{reason}: stopping the {len(self.started)} processes this job started ({keys})")
        failures = self.stop([item_of(p) for p in reversed(self.started)], why="cleanup", progress=False)
        for item, why in failures:
            self.ctx.log(f"could not stop {item.key} on {item.node}: {why}; it may still run", node=item.node,
                         stream="error")
        for node in dict.fromkeys(p.node for p in self.started):
            if node not in self.failed_nodes:
                self.ctx.node_state(node, NodeStepState.SKIPPED, f"{reason}: what this job started here was stopped")

    # --- health ------------------------------------------------------------------------------------------
    def wait_healthy(self, procs: list[PlannedProcess]) -> None:
        timeout = self.params.get("health_timeout", 120)
        pending = {p.key: p for p in procs if p.health_url}
        if not pending:
            return
        self.ctx.step(f"waiting up to {timeout}s for {len(pending)} processes to answer their health check")
        deadline = time.monotonic() + timeout
        delay = 0.1
        while pending:
            self.ctx.check_cancel()
            items = [item_of(p) for p in pending.values()]
            for key, (state, pid, healthy) in self.states(items, probe=True).items():
                p = pending[key]
                if state != "running":
                    detail = f"exited before it became healthy ({state}{f' pid {pid}' if pid else ''})"
                    self.mark(key, ProcessState.FAILED, detail)
                    self.fail(p.node, f"step 'wait healthy' failed on {p.node}: {p.key} {detail}", item=item_of(p))
                if healthy:
                    del pending[key]
                    self.ctx.log(f"{key} healthy ({p.health_url})", node=p.node)
                    self.progress(p.node, f"{key} healthy")
            if pending and time.monotonic() > deadline:
                first = next(iter(pending.values()))
                self.mark(first.key, ProcessState.FAILED, f"not healthy after {timeout}s")
                self.fail(first.node, f"step 'wait healthy' timed out on {first.node}: {', '.join(pending)} did "
                          f"not answer {first.health_url} within {timeout}s", item=item_of(first))
            if pending:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    def probe(self, proxy: PlannedProcess) -> str:
        model = self.spec.model.served_name
        self.ctx.step(f"probe: one /v1/completions request for {model} through the proxy", node=proxy.node)
        command = remote.completion_probe_command(address=proxy.address, port=proxy.ports[0], model=model)
        deadline = time.monotonic() + PROBE_ATTEMPTS_SECONDS
        while True:
            self.ctx.check_cancel()
            result = self.fleet.run(proxy.node, command, timeout=90)
            code, body = remote.split_http(result.stdout)
            if result.ok and code == 200:
                try:
                    text = json.loads(body)["choices"][0]["text"]
                except (ValueError, KeyError, IndexError, TypeError):
                    self.fail(proxy.node, f"step 'probe' on {proxy.node}: the proxy answered 200 but not a completion: "
                              f"{body[:300]}")
                self.progress(proxy.node, "probe answered")
                return text
            if time.monotonic() > deadline:
                self.fail(proxy.node, f"step 'probe' failed on {proxy.node}: HTTP {code or 'none'} "
                          f"{(body or result.stderr).strip()[:300]}", item=item_of(proxy))
            time.sleep(1)

    def done(self, nodes, message: str = "done") -> None:
        for n in dict.fromkeys(nodes):
            self.ctx.node_state(n, NodeStepState.DONE, message)

    def close(self) -> None:
        self.fleet.close()


def _guarded(run: DeploymentRun, body) -> None:
    """Runs body; on any failure or cancel, stops what this job started (unless keep_on_failure)."""
    try:
        body()
    except JobCanceled:
        run.cleanup_started("canceled")
        raise
    except JobFailed:
        run.cleanup_started("failed")
        raise
    except Exception:
        run.cleanup_started("internal error")
        raise
    finally:
        run.close()


# --- deploy ----------------------------------------------------------------------------------------------

@job_handler(JobKind.DEPLOY)
def deploy(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    _guarded(run, lambda: _deploy(run))


def _deploy(run: DeploymentRun) -> None:
    ctx, plan = run.ctx, run.plan
    planned = {p.key: p for p in plan.processes}
    unwanted = [item_of_row(r) for k, r in run.rows.items()
                if k not in planned and r.state != ProcessState.STOPPED]
    steps = Counter()
    for p in plan.processes:
        steps[p.node] += 2 if p.health_url else 1
    for i in unwanted:
        steps[i.node] += 1
    proxy = next(p for p in plan.processes if p.role == "proxy")
    steps[proxy.node] += 1
    for n in steps:
        steps[n] += 1  # connect
    run.planned_steps(steps)
    run.connect(list(steps))
    ctx.check_cancel()

    ctx.step(f"reading the state of {len(planned)} planned and {len(unwanted)} no longer wanted processes")
    actual = run.states([item_of(p) for p in plan.processes] + unwanted)
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
    kept, replaced = [], []
    for stage in plan.stages:
        ctx.check_cancel()
        to_start, to_replace = [], []
        for p in stage.processes:
            state, pid, _ = actual[p.key]
            row = run.rows.get(p.key)
            if state == "running" and row and row.fingerprint == fingerprint(p):
                kept.append(p.key)
                ctx.log(f"{p.key} already runs as wanted (pid {pid}): kept", node=p.node)
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
        ctx.step(f"stage {stage.name}: starting {len(to_start) + len(to_replace)}, keeping "
                 f"{len(stage.processes) - len(to_start) - len(to_replace)}")
        run.start(to_start + to_replace)
        ctx.check_cancel()
        run.wait_healthy(list(stage.processes))
    answer = run.probe(proxy)
    ctx.log(f"probe answer: {answer!r}", node=proxy.node)
    run.done(steps)
    ctx.summary = (f"r{run.revision.number} deployed: {len(planned)} processes ({len(run.started)} started"
                   f"{f', {len(replaced)} replaced' if replaced else ''}, {len(kept)} kept"
                   f"{f', {len(gone)} stopped' if gone else ''}); the proxy answered a completion: {answer!r}")


# --- stop ------------------------------------------------------------------------------------------------

@job_handler(JobKind.STOP)
def stop(ctx: JobContext) -> None:
    run = DeploymentRun(ctx, strict=False)
    try:
        _stop(run)
    finally:
        run.close()


def _stop(run: DeploymentRun) -> None:
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
    for n in reachable:
        if not any(i.node == n for i, _ in failures):
            ctx.node_state(n, NodeStepState.DONE, "stopped")
    if stuck:
        raise JobFailed("could not stop, so these may still run: " + "; ".join(stuck)
                        + ". Run stop again once the nodes are reachable")
    ctx.summary = f"stopped: {len(items)} processes checked on {len(steps)} nodes, none left running"


# --- restart ---------------------------------------------------------------------------------------------

@job_handler(JobKind.RESTART)
def restart(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    _guarded(run, lambda: _restart(run, [ctx.job.params["instance"]]))


@job_handler(JobKind.ROLLING_RESTART)
def rolling_restart(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    role = ctx.job.params["role"]
    names = [i.name for i in run.spec.instances if i.role == role]
    _guarded(run, lambda: _restart(run, names))


def _proxy_admin(run: DeploymentRun, proxy: PlannedProcess, p: PlannedProcess, action: str) -> None:
    command = remote.proxy_admin_command(proxy_address=proxy.address, proxy_port=proxy.ports[0],
                                         header_file=admin_header_path(run.spec), role=p.role,
                                         backend=f"{p.address}:{p.ports[0]}", action=action)
    result = run.fleet.run(proxy.node, command, timeout=20)
    code, body = remote.split_http(result.stdout)
    if code != 200:
        run.fail(proxy.node, f"step '{action} {p.key}' in the proxy failed: HTTP {code or 'none'} "
                 f"{(body or result.stderr).strip()[:300]}")
    run.ctx.log(f"proxy: {action} {p.address}:{p.ports[0]} ({p.key})", node=proxy.node)


def _restart(run: DeploymentRun, instances: list[str]) -> None:
    ctx, plan = run.ctx, run.plan
    proxy = next(p for p in plan.processes if p.role == "proxy")
    groups = [[p for p in plan.processes if p.instance == name] for name in instances]
    steps = Counter()
    for group in groups:
        for p in group:
            steps[p.node] += 3
    steps[proxy.node] += 1
    run.planned_steps(steps)
    run.connect(list(steps))
    proxy_up = run.states([item_of(proxy)])[proxy.key][0] == "running"
    run.progress(proxy.node, "proxy running" if proxy_up else "proxy not running: no drain")
    for name, group in zip(instances, groups, strict=True):
        ctx.check_cancel()
        ctx.step(f"restart instance {name} ({len(group)} processes)")
        if proxy_up:
            for p in group:
                _proxy_admin(run, proxy, p, "drain")
        run.stop([item_of(p) for p in group], why=f"restart {name}")
        run.started = []  # a failure from here on stops this instance's new processes only
        run.start(group)
        run.wait_healthy(group)
        if proxy_up:
            for p in group:
                _proxy_admin(run, proxy, p, "undrain")
        run.started = []
    run.done(steps)
    ctx.summary = f"restarted {', '.join(instances)}{' (drained in the proxy while down)' if proxy_up else ''}"


# --- preflight -------------------------------------------------------------------------------------------

@job_handler(JobKind.PREFLIGHT)
def preflight(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    try:
        _preflight(run)
    finally:
        run.close()


MIN_FREE_KIB = 1024 * 1024  # 1 GiB for logs


def _preflight(run: DeploymentRun) -> None:
    from apps.inventory.npu_smi import NpuSmiParseError, npu_smi_parse_info

    ctx, plan = run.ctx, run.plan
    by_node: dict[str, list[PlannedProcess]] = {}
    for p in plan.processes:
        by_node.setdefault(p.node, []).append(p)
    run.planned_steps(Counter({n: 2 for n in by_node}))
    run.connect(list(by_node))
    own = {r.key: r for r in run.rows.values() if r.state == ProcessState.RUNNING}
    scripts = []
    for node, procs in by_node.items():
        binaries = sorted({p.launch.argv[0] for p in procs} | {"curl"})
        npu = any(p.role in ("prefill", "decode") for p in procs)
        if npu:
            binaries.append("npu-smi")
        scripts.append((node, remote.preflight_script(binaries=binaries, run_dir=run.spec.run_dir, npu=npu)))
    problems: list[str] = []
    for (node, _), o in zip(scripts, run.fleet.run_many(scripts, timeout=60), strict=True):
        mine = []
        if o.error:
            mine.append(o.error)
        else:
            sections = remote.split_sections(o.result.stdout)
            mine += [f"`{line.split()[1]}` is not on the login PATH" for line in sections.get("binaries", "").splitlines()
                     if line.startswith("missing ")]
            address = run.nodes[node].address
            listening = remote.listening_ports(sections.get("ports", ""), address)
            if sections.get("ports", "").strip() == "ss-missing":
                mine.append("`ss` is missing: cannot check ports")
            for p in by_node[node]:
                wanted = set(p.ports)
                if p.kv_port_window:
                    wanted |= set(range(p.kv_port_window[0], p.kv_port_window[1] + 1))
                busy = sorted(wanted & listening)
                if busy and p.key not in own:
                    mine.append(f"ports {busy} of {p.key} are already in use on {address}")
            df = sections.get("disk", "").split()
            if len(df) >= 4 and df[3].isdigit():
                if int(df[3]) < MIN_FREE_KIB:
                    mine.append(f"only {int(df[3]) // 1024} MiB free for {run.spec.run_dir} (need 1024 MiB)")
            else:
                mine.append(f"cannot read free disk space for {run.spec.run_dir}: {' '.join(df) or 'no output'}")
            if "npu" in sections:
                mine += _npu_problems(sections["npu"], by_node[node], own, npu_smi_parse_info, NpuSmiParseError)
        if mine:
            ctx.node_state(node, NodeStepState.FAILED, "; ".join(mine)[:500])
            for m in mine:
                ctx.log(m, node=node, stream="error")
            problems += [f"{node}: {m}" for m in mine]
        else:
            ctx.log("binaries, ports, disk" + (", NPUs" if "npu" in sections else "") + " ok", node=node)
            ctx.node_state(node, NodeStepState.DONE, "all checks passed", step_done=True)
    if problems:
        raise JobFailed(f"preflight found {len(problems)} problems: " + "; ".join(problems))
    ctx.summary = f"preflight passed on {len(by_node)} nodes: SSH, host keys, binaries, ports, disk, NPUs"


def _npu_problems(text, procs, own, parse, parse_error) -> list[str]:
    try:
        info = parse(text)
    except parse_error as exc:
        return [f"cannot read `npu-smi info`: {exc}"]
    out = []
    own_pids = {r.pid for r in own.values() if r.pid}
    by_logical = {d.logical_id: d for d in info.dies}
    chip_to_logical = {(d.npu_id, d.chip_id): d.logical_id for d in info.dies}
    users: dict[int, list] = {}
    for proc in info.processes:
        users.setdefault(chip_to_logical.get((proc.npu_id, proc.chip_id), -1), []).append(proc)
    for p in procs:
        devices = p.launch.env.get("ASCEND_RT_VISIBLE_DEVICES", "")
        for d in (int(x) for x in devices.split(",") if x.strip().isdigit()):
            die = by_logical.get(d)
            if die is None:
                out.append(f"{p.key}: NPU {d} is not present")
                continue
            if die.health.strip().upper() != "OK":
                out.append(f"{p.key}: NPU {d} health is {die.health}")
            others = [u for u in users.get(d, []) if u.pid not in own_pids]
            if others:
                u = others[0]
                out.append(f"{p.key}: NPU {d} is busy (pid {u.pid} {u.name}, {u.memory_mb} MB)")
    return out
