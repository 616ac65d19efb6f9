"""The `host` runtime: each planned process runs on its node as a detached process started over SSH and found by its
pid file (sshexec/process_commands.py), its launch files written next to it. Its job level is process_jobs/, done
process by process through the process level below."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from sshexec import LaunchFile, private_dirs_command, remove_files_command, stop_command, tail_command
from sshexec import probe_commands as remote

from ..choices import ProcessState
from ..fleet import NodeFailure
from ..revision_plan import fingerprint, start_line
from ..topology import PlannedProcess
from . import process_jobs
from .base import States
from .run_items import Item, item_of, stage_rank

if TYPE_CHECKING:
    from ..jobs.deployment_run import DeploymentRun

START_TIMEOUT = 30
TAIL_LINES = 15


class HostRuntime:
    name = "host"

    # --- job level ---------------------------------------------------------------------------------------
    def deploy(self, run: DeploymentRun) -> None:
        process_jobs.deploy(run)

    def stop(self, run: DeploymentRun) -> None:
        process_jobs.stop(run)

    def restart(self, run: DeploymentRun, instances: list[str]) -> None:
        process_jobs.restart(run, instances)

    def refresh(self, run: DeploymentRun) -> None:
        process_jobs.refresh(run)

    def preflight(self, run: DeploymentRun) -> None:
        process_jobs.preflight(run)

    # --- process level -----------------------------------------------------------------------------------
    def read_states(self, run: DeploymentRun, items: list[Item], *, probe: bool = False,
                    unreachable: dict[str, str] | None = None) -> States:
        pairs = [(i.node, remote.check_command(i.pid_file, i.health_url if probe else None)) for i in items]
        out = {}
        for item, o in zip(items, run.fleet.run_many(pairs, timeout=20, quiet=True), strict=True):
            if o.error and unreachable is not None:
                unreachable[item.key] = o.error
                continue
            if o.error:
                run.fail(item.node, f"reading the state of {item.key} on {item.node} failed: {o.error}")
            try:
                out[item.key] = remote.parse_check(o.result.stdout)
            except ValueError as exc:
                run.fail(item.node, f"reading the state of {item.key} on {item.node}: {exc}")
        return out

    def start_processes(self, run: DeploymentRun, procs: list[PlannedProcess]) -> None:
        if not procs:
            return
        if any(p.role == "proxy" for p in procs):
            run.write_admin_token(next(p for p in procs if p.role == "proxy").node)
        run.write_files(procs)
        for p in procs:
            run.ctx.step(f"start {p.key} ({p.role}) on {p.node}: {' '.join(p.launch.argv[:3])} ...", node=p.node)
            # Recorded before the start is sent: if the connection or this worker dies before the PID comes back,
            # the process may run, and the row says so (stop and the next deploy find it by its pid file).
            run.record(p, None, ProcessState.UNKNOWN, "starting: the start was sent, its answer not yet received")
        outcomes = run.fleet.run_many([(p.node, self.start_line(run, p)) for p in procs], timeout=START_TIMEOUT)
        failed = None
        for p, o in zip(procs, outcomes, strict=True):
            if o.ok:
                try:
                    pid, said = self.started(run, p, o.result.stdout)
                except ValueError as exc:  # it may run: the cleanup stops it, its row stays unknown
                    run.started.append(p)
                    why = f"started, but its answer could not be read: {exc}"
                    run.mark(p.key, ProcessState.UNKNOWN, why)
                    failed = failed or (p, why)
                    continue
                run.started.append(p)
                run.record(p, pid, ProcessState.RUNNING)
                run.ctx.log(f"{p.key} started, {said}", node=p.node)
                run.progress(p.node, f"started {p.key}")
                continue
            if o.error:  # the start may have run on the node: its row stays unknown
                why = o.error
                run.mark(p.key, ProcessState.UNKNOWN, f"start sent, no answer: {why}")
            else:
                why = f"exit {o.result.exit_status}: {o.result.stderr.strip()[-500:]}"
                run.mark(p.key, ProcessState.FAILED, why)
            failed = failed or (p, why)
        if failed:
            p, why = failed
            run.fail(p.node, f"step 'start {p.key}' failed on {p.node}: {why}", item=item_of(p))

    def start_line(self, run: DeploymentRun, p: PlannedProcess) -> str:
        return start_line(p)

    def fingerprint(self, run: DeploymentRun, p: PlannedProcess) -> str:
        return fingerprint(p)

    def started(self, run: DeploymentRun, p: PlannedProcess, stdout: str) -> tuple[int | None, str]:
        """(pid, what the job log says of it) from the start's output; ValueError when it cannot be read."""
        last = (stdout.strip().splitlines() or [""])[-1]
        pid = int(last) if last.isdecimal() else None
        return pid, f"pid {pid}"

    def stop_items(self, run: DeploymentRun, items: list[Item], *, why: str,
                   progress: bool = True) -> list[tuple[Item, str]]:
        grace = run.options.stop_grace
        failures = []
        for rank in sorted({stage_rank(i.role) for i in items}, reverse=True):
            group = [i for i in items if stage_rank(i.role) == rank]
            for i in group:
                run.ctx.step(f"stop {i.key} on {i.node} ({why})", node=i.node)
            outcomes = run.fleet.run_many([(i.node, self.stop_line(run, i, grace)) for i in group],
                                          timeout=grace + 20)
            for i, o in zip(group, outcomes, strict=True):
                if o.ok:
                    said = o.result.stdout.strip() or "stopped"
                    run.ctx.log(f"{i.key}: {said}", node=i.node)
                    if said.startswith("foreign "):
                        run.ctx.log(f"{i.key}: {i.pid_file} named pid {said.split()[-1]}, a process this control "
                                    "plane did not start there (the pid was reused, or the file was planted): not "
                                    "signalled; the stale pid file was removed", node=i.node, stream="stderr")
                    run.mark(i.key, ProcessState.STOPPED, said)
                    if progress:
                        run.progress(i.node, f"stopped {i.key}")
                else:
                    reason = o.error or (o.result.stderr.strip() or f"exit {o.result.exit_status}")
                    run.mark(i.key, ProcessState.UNKNOWN, f"stop failed: {reason}")
                    failures.append((i, reason))
        return failures

    def stop_line(self, run: DeploymentRun, item: Item, grace: int) -> str:
        return stop_command(item.pid_file, grace)

    def tail_log(self, run: DeploymentRun, item: Item) -> str:
        try:
            result = run.fleet.run(item.node, self.tail_line(run, item), timeout=15)
        except NodeFailure as exc:
            return f"(could not read the log: {exc})"
        text = (result.stdout or result.stderr).rstrip()
        for line in text.splitlines():
            run.ctx.log(line, node=item.node, stream="stderr")
        return text

    def tail_line(self, run: DeploymentRun, item: Item, lines: int = TAIL_LINES) -> str:
        return tail_command(item.log_path, lines)

    def write_files(self, run: DeploymentRun, procs: list[PlannedProcess]) -> None:
        """After checking their directories like a run dir (the start checks the files again and refuses a missing or
        different one)."""
        todo: dict[str, dict[str, LaunchFile]] = {}
        for p in procs:
            for f in p.launch.files:
                path = str(f.path)
                if (p.node, path) in run.files_written:
                    continue
                first = todo.setdefault(p.node, {}).setdefault(path, f)
                if (first.content, first.mode) != (f.content, f.mode):
                    run.fail(p.node, f"{path} on {p.node} is planned twice with different content or mode")
        if not todo:
            return
        checks = [(node, private_dirs_command(sorted({str(PurePosixPath(path).parent) for path in files}),
                                              files=sorted(files))) for node, files in todo.items()]
        for (node, files), o in zip(todo.items(), run.fleet.run_many(checks, timeout=15), strict=True):
            if not o.ok:
                run.fail(node, f"cannot write the launch files on {node}: "
                         f"{o.error or o.result.stderr.strip()[-500:] or f'exit {o.result.exit_status}'}")
            for path, f in files.items():
                run.fleet.put_text(node, path, f.content, mode=f.mode)
                run.files_written.add((node, path))
                run.ctx.log(f"wrote {path} ({len(f.content.encode())} bytes, mode {f.mode:04o})", node=node)

    def remove_files(self, run: DeploymentRun, by_node: dict[str, set[str]]) -> list[tuple[str, str]]:
        """One already gone is fine."""
        pairs = [(node, remove_files_command(sorted(paths))) for node, paths in by_node.items() if paths]
        failures = []
        for o in run.fleet.run_many(pairs, timeout=20, quiet=True):
            if o.ok:
                run.ctx.log(f"launch files: {', '.join(o.result.stdout.splitlines())}", node=o.node)
            else:
                reason = o.error or o.result.stderr.strip()[-500:] or f"exit {o.result.exit_status}"
                run.ctx.log(f"could not remove the launch files: {reason}", node=o.node, stream="error")
                failures.append((o.node, reason))
        return failures
