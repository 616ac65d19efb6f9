"""One job run on a deployment: what every handler shares. It loads the revision and renders its plan, then
connects, reads each process's state from its pid file, starts and stops processes stage by stage, records
Process rows and reports per-node progress; `guarded` stops what the run started when it fails or is canceled
(unless params.keep_on_failure). The health and probe gates are in runtimes/health_gate.py."""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

from django.utils import timezone

from apps.inventory.secrets import is_undecryptable
from apps.jobs.choices import NodeStepState
from apps.jobs.context import JobCanceled, JobContext, JobFailed, reconnect_after
from sshexec import LaunchFile, private_dirs_command, remove_files_command, stop_command, tail_command
from sshexec import probe_commands as remote

from ..choices import ProcessState
from ..fleet import Fleet, NodeFailure
from ..inventory_lookup import cluster_nodes
from ..job_params import JobParams
from ..models import Deployment, Process, Revision, new_admin_token
from ..revision_checks import RevisionInvalid
from ..revision_plan import fingerprint, render_plan, revision_spec, start_line
from ..runtimes.run_items import Item, item_of, stage_rank
from ..topology import Plan, PlannedProcess, TopologyInvalid, admin_header_path, admin_token_path

START_TIMEOUT = 30
TAIL_LINES = 15


class DeploymentRun:
    def __init__(self, ctx: JobContext, *, strict: bool = True):
        self.ctx = ctx
        self.params = ctx.job.params
        self.options = JobParams.stored(self.params)
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
        self.fleet = Fleet(ctx, self.nodes, max_parallel=self.options.max_parallel)
        self.rows = {r.key: r for r in self.deployment.processes.all()}
        self.started: list[PlannedProcess] = []
        self.keep = self.options.keep_on_failure
        self.failed_nodes: set[str] = set()
        self.files_written: set[tuple[str, str]] = set()  # (node, path) of the launch files this job wrote
        self.undeploy = None  # launch_profile mindie: takes down what deploy_ac_job.py submitted (jobs/mindie.py)

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
    def states(self, items: list[Item], *, probe: bool = False,
               unreachable: dict[str, str] | None = None) -> dict[str, tuple[str, int | None, bool | None]]:
        """(state, pid, healthy) per item key. An SSH failure fails the job, unless `unreachable` is given: then it
        gets key -> the failure, and the item is left out."""
        pairs = [(i.node, remote.check_command(i.pid_file, i.health_url if probe else None)) for i in items]
        out = {}
        for item, o in zip(items, self.fleet.run_many(pairs, timeout=20, quiet=True), strict=True):
            if o.error and unreachable is not None:
                unreachable[item.key] = o.error
                continue
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

    def mark(self, key: str, state: ProcessState, detail: str = "", *, pid: int | None = None) -> None:
        """Sets a row's state (and its pid, when given: a process found running)."""
        row = self.rows.get(key)
        if row is None:
            return
        row.state, row.state_detail, row.last_job = state, detail[:2000], self.ctx.job
        if state == ProcessState.STOPPED:
            row.stopped_at = timezone.now()
        if pid is not None:
            row.pid = pid
        row.save(update_fields=["state", "state_detail", "last_job", "stopped_at", "pid", "updated"])

    def start(self, procs: list[PlannedProcess]) -> None:
        if not procs:
            return
        if any(p.role == "proxy" for p in procs):
            self.write_admin_token(next(p for p in procs if p.role == "proxy").node)
        self.write_files(procs)
        for p in procs:
            self.ctx.step(f"start {p.key} ({p.role}) on {p.node}: {' '.join(p.launch.argv[:3])} ...", node=p.node)
            # Recorded before the start is sent: if the connection or this worker dies before the PID comes back,
            # the process may run, and the row says so (stop and the next deploy find it by its pid file).
            self.record(p, None, ProcessState.UNKNOWN, "starting: the start was sent, its answer not yet received")
        outcomes = self.fleet.run_many([(p.node, start_line(p)) for p in procs], timeout=START_TIMEOUT)
        failed = None
        for p, o in zip(procs, outcomes, strict=True):
            if o.ok:
                last = (o.result.stdout.strip().splitlines() or [""])[-1]
                pid = int(last) if last.isdecimal() else None
                self.started.append(p)
                self.record(p, pid, ProcessState.RUNNING)
                self.ctx.log(f"{p.key} started, pid {pid}", node=p.node)
                self.progress(p.node, f"started {p.key}")
                continue
            if o.error:  # the start may have run on the node: its row stays unknown
                why = o.error
                self.mark(p.key, ProcessState.UNKNOWN, f"start sent, no answer: {why}")
            else:
                why = f"exit {o.result.exit_status}: {o.result.stderr.strip()[-500:]}"
                self.mark(p.key, ProcessState.FAILED, why)
            failed = failed or (p, why)
        if failed:
            p, why = failed
            self.fail(p.node, f"step 'start {p.key}' failed on {p.node}: {why}", item=item_of(p))

    def write_admin_token(self, node: str) -> None:
        token = self.deployment.proxy_admin_token
        if is_undecryptable(token):  # the proxy starting now reads the file written below: a new token loses nothing
            token = self.deployment.proxy_admin_token = new_admin_token()
            Deployment.objects.filter(pk=self.deployment.pk).update(proxy_admin_token=token)
            self.ctx.log("the proxy admin token could not be decrypted with the current PDCP_SECRETS_KEY: "
                         "a new one was made for this proxy start", node=node)
        # run_dir/secrets is checked like a run dir (sshexec/process_commands.py): no other local user may be able to
        # swap the directory or the files for their own.
        token_file, header_file = admin_token_path(self.spec), admin_header_path(self.spec)
        secrets_dir = token_file.parent
        command = private_dirs_command([self.spec.run_dir, secrets_dir], files=[token_file, header_file])
        result = self.fleet.run(node, command, timeout=15)
        if not result.ok:
            self.fail(node, f"cannot use {secrets_dir} on {node} for the proxy's admin token: "
                      f"{result.stderr.strip()[-500:] or f'exit {result.exit_status}'}")
        self.fleet.put_text(node, str(token_file), token + "\n", mode=0o600)
        self.fleet.put_text(node, str(header_file), f"Authorization: Bearer {token}\n", mode=0o600)

    def write_files(self, procs: list[PlannedProcess]) -> None:
        """Writes the launch files of procs on their nodes, once per node and path in this job, after checking their
        directories like a run dir (the start checks the files again and refuses a missing or different one)."""
        todo: dict[str, dict[str, LaunchFile]] = {}
        for p in procs:
            for f in p.launch.files:
                path = str(f.path)
                if (p.node, path) in self.files_written:
                    continue
                first = todo.setdefault(p.node, {}).setdefault(path, f)
                if (first.content, first.mode) != (f.content, f.mode):
                    self.fail(p.node, f"{path} on {p.node} is planned twice with different content or mode")
        if not todo:
            return
        checks = [(node, private_dirs_command(sorted({str(PurePosixPath(path).parent) for path in files}),
                                              files=sorted(files))) for node, files in todo.items()]
        for (node, files), o in zip(todo.items(), self.fleet.run_many(checks, timeout=15), strict=True):
            if not o.ok:
                self.fail(node, f"cannot write the launch files on {node}: "
                          f"{o.error or o.result.stderr.strip()[-500:] or f'exit {o.result.exit_status}'}")
            for path, f in files.items():
                self.fleet.put_text(node, path, f.content, mode=f.mode)
                self.files_written.add((node, path))
                self.ctx.log(f"wrote {path} ({len(f.content.encode())} bytes, mode {f.mode:04o})", node=node)

    def recorded_plans(self) -> list[Plan]:
        """The plans of the other revisions the recorded processes not known to be stopped were started from: where
        their launch files are, as rows say where their pid files are. One that no longer renders is left out; one
        that now collides with another deployment still says where its files are (no database checks)."""
        plans: dict[int, Plan | None] = {self.revision.pk: None}
        for row in self.rows.values():
            if row.state != ProcessState.STOPPED and row.revision_id and row.revision_id not in plans:
                try:
                    plans[row.revision_id] = render_plan(revision_spec(row.revision), self.deployment.cluster,
                                                         database_checks=False)
                except (RevisionInvalid, TopologyInvalid):
                    plans[row.revision_id] = None
                    self.ctx.log(f"revision r{row.revision.number} of {row.key} does not validate now: the launch "
                                 "files it named, if any, are not known and stay", stream="stderr")
        return [plan for plan in plans.values() if plan]

    def remove_files(self, by_node: dict[str, set[str]]) -> list[tuple[str, str]]:
        """Removes launch files, per node (one already gone is fine); returns (node, reason) where that failed."""
        pairs = [(node, remove_files_command(sorted(paths))) for node, paths in by_node.items() if paths]
        failures = []
        for o in self.fleet.run_many(pairs, timeout=20, quiet=True):
            if o.ok:
                self.ctx.log(f"launch files: {', '.join(o.result.stdout.splitlines())}", node=o.node)
            else:
                reason = o.error or o.result.stderr.strip()[-500:] or f"exit {o.result.exit_status}"
                self.ctx.log(f"could not remove the launch files: {reason}", node=o.node, stream="error")
                failures.append((o.node, reason))
        return failures

    def stop(self, items: list[Item], *, why: str, progress: bool = True) -> list[tuple[Item, str]]:
        """Stops items stage by stage, backwards (proxy first). Returns (item, reason) for those it could not stop."""
        grace = self.options.stop_grace
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
                    if said.startswith("foreign "):
                        self.ctx.log(f"{i.key}: {i.pid_file} named pid {said.split()[-1]}, a process this control "
                                     "plane did not start there (the pid was reused, or the file was planted): not "
                                     "signalled; the stale pid file was removed", node=i.node, stream="stderr")
                    self.mark(i.key, ProcessState.STOPPED, said)
                    if progress:
                        self.progress(i.node, f"stopped {i.key}")
                else:
                    reason = o.error or (o.result.stderr.strip() or f"exit {o.result.exit_status}")
                    self.mark(i.key, ProcessState.UNKNOWN, f"stop failed: {reason}")
                    failures.append((i, reason))
        return failures

    def cleanup_started(self, reason: str) -> None:
        if self.undeploy and not self.keep:
            self._undeploy(reason)
        if not self.started and not self.files_written:
            return
        keys = ", ".join(p.key for p in self.started)
        if self.keep:
            self.ctx.log(f"keep_on_failure: leaving what this job started running for debugging: {keys or 'none'}"
                         f"{' and the launch files it wrote' if self.files_written else ''}", stream="stderr")
            return
        failures = []
        if self.started:
            self.ctx.step(f"{reason}: stopping the {len(self.started)} processes this job started ({keys})")
            failures = self.stop([item_of(p) for p in reversed(self.started)], why="cleanup", progress=False)
        for item, why in failures:
            self.ctx.log(f"could not stop {item.key} on {item.node}: {why}; it may still run", node=item.node,
                         stream="error")
        self.remove_files(self._unused_files(stuck_nodes={i.node for i, _ in failures}))
        for node in dict.fromkeys(p.node for p in self.started):
            if node not in self.failed_nodes:
                self.ctx.node_state(node, NodeStepState.SKIPPED, f"{reason}: what this job started here was stopped")

    def _undeploy(self, reason: str) -> None:
        try:
            left = self.undeploy(reason)
        except (JobFailed, NodeFailure) as exc:
            self.ctx.log(f"could not undeploy: {exc}", stream="error")
            return
        if left:
            self.ctx.log(f"{len(left)} pods still run after delete.sh: {', '.join(p.name for p in left)}",
                         stream="error")
        for key, row in self.rows.items():
            if row.state != ProcessState.STOPPED and not left:
                self.mark(key, ProcessState.STOPPED, f"{reason}: undeployed")

    def _unused_files(self, stuck_nodes: set[str]) -> dict[str, set[str]]:
        """The launch files this job wrote that no process of the plan still running names (a kept one may read
        them), except on nodes where a stop failed."""
        running = {(p.node, str(f.path)) for p in (self.plan.processes if self.plan else ())
                   if (row := self.rows.get(p.key)) and row.state == ProcessState.RUNNING for f in p.launch.files}
        out: dict[str, set[str]] = {}
        for node, path in self.files_written - running:
            if node not in stuck_nodes:
                out.setdefault(node, set()).add(path)
        return out

    def done(self, nodes, message: str = "done") -> None:
        for n in dict.fromkeys(nodes):
            self.ctx.node_state(n, NodeStepState.DONE, message)

    def close(self) -> None:
        self.fleet.close()


def guarded(run: DeploymentRun, body) -> None:
    """Runs body; on any failure or cancel, stops what this job started (unless keep_on_failure)."""
    try:
        body()
    except JobCanceled:
        run.cleanup_started("canceled")
        raise
    except JobFailed:
        run.cleanup_started("failed")
        raise
    except NodeFailure as exc:  # SSH to a node broke mid-step: the operator's problem to fix, not a bug
        run.cleanup_started("failed")
        raise JobFailed(str(exc)) from exc
    except Exception as exc:
        run.cleanup_started("the database connection failed" if reconnect_after(exc) else "internal error")
        raise
    finally:
        run.close()


def files_by_node(plans) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for plan in plans:
        for p in plan.processes if plan else ():
            for f in p.launch.files:
                out.setdefault(p.node, set()).add(str(f.path))
    return out
