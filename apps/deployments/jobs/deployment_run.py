"""One job run on a deployment: what every handler shares. It loads the revision, renders its plan and takes the
runtime of its launch profile (runtimes/), which reads, starts and stops the processes; the run connects, records
Process rows and reports per-node progress; `guarded` stops what the run started when it fails or is canceled
(unless params.keep_on_failure). The health and probe gates are in runtimes/health_gate.py."""

from __future__ import annotations

from collections import Counter

from django.utils import timezone

from apps.inventory.secrets import is_undecryptable
from apps.jobs.choices import NodeStepState
from apps.jobs.context import JobCanceled, JobContext, JobFailed, reconnect_after
from sshexec import private_dirs_command

from ..choices import ProcessState
from ..fleet import Fleet, NodeFailure
from ..inventory_lookup import cluster_nodes
from ..job_params import JobParams
from ..models import Deployment, Process, Revision, new_admin_token
from ..revision_checks import RevisionInvalid
from ..revision_plan import render_plan, revision_spec
from ..runtimes import runtime_for
from ..runtimes.base import States
from ..runtimes.run_items import Item, item_of
from ..topology import Plan, PlannedProcess, TopologyInvalid, admin_header_path, admin_token_path


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
        self.runtime = runtime_for(self.plan, self.spec)
        self.nodes = cluster_nodes(self.deployment.cluster)
        self.fleet = Fleet(ctx, self.nodes, max_parallel=self.options.max_parallel)
        self.rows = {r.key: r for r in self.deployment.processes.all()}
        self.started: list[PlannedProcess] = []
        self.keep = self.options.keep_on_failure
        self.failed_nodes: set[str] = set()
        self.files_written: set[tuple[str, str]] = set()  # (node, path) of the launch files this job wrote
        self.undeploy = None  # set by a runtime that submits a whole deployment: what takes it down again

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

    # --- the runtime's process level (runtimes/base.py) --------------------------------------------------
    def states(self, items: list[Item], *, probe: bool = False, unreachable: dict[str, str] | None = None) -> States:
        return self.runtime.read_states(self, items, probe=probe, unreachable=unreachable)

    def start(self, procs: list[PlannedProcess]) -> None:
        self.runtime.start_processes(self, procs)

    def stop(self, items: list[Item], *, why: str, progress: bool = True) -> list[tuple[Item, str]]:
        return self.runtime.stop_items(self, items, why=why, progress=progress)

    def tail(self, item: Item) -> str:
        return self.runtime.tail_log(self, item)

    def write_files(self, procs: list[PlannedProcess]) -> None:
        self.runtime.write_files(self, procs)

    def remove_files(self, by_node: dict[str, set[str]]) -> list[tuple[str, str]]:
        return self.runtime.remove_files(self, by_node)

    # --- rows, the proxy's admin token, cleanup -------------------------------------------------------------
    def record(self, p: PlannedProcess, pid: int | None, state: ProcessState, detail: str = "") -> Process:
        now = timezone.now()
        node = self.nodes.get(p.node)
        defaults = dict(revision=self.revision, node=node, node_name=p.node, role=p.role, instance=p.instance or "",
                        address=p.address, ports=list(p.ports), health_url=p.health_url or "", pid=pid,
                        command=self.runtime.start_line(self, p), fingerprint=self.runtime.fingerprint(self, p),
                        log_path=str(p.launch.log_file),
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

