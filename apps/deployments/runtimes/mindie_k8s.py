"""The `mindie-k8s` runtime of launch_profile mindie (docs/mindie.md §1): everything goes through the deploy host,
as an operator would do it by hand. Deploy writes user_config.json, runs deploy_ac_job.py (its output streamed into the
job), waits for the coordinator's ready line, records where Kubernetes placed each pod and sends one completion
through the coordinator; a failure undeploys what it submitted. Stop runs delete.sh and checks that no pod is left.
Refresh reads the pods back, preflight checks the deploy host; restart is refused (the pods are MindIE's)."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

from apps.jobs.context import JobFailed
from sshexec import mindie_commands as kube
from sshexec import private_dirs_command, remove_files_command
from sshexec import probe_commands as remote

from ..choices import ProcessState
from ..models import Process
from ..revision_plan import fingerprint
from ..topology import PlannedProcess
from .health_gate import probe
from .host import HostRuntime

if TYPE_CHECKING:
    from ..jobs.deployment_run import DeploymentRun

POLL_S = 2.0
DEPLOY_TIMEOUT_S = 900  # deploy_ac_job.py renders YAML and kubectl-applies it: minutes at most
LOG_LINES_ON_FAILURE = 20


class MindieK8sRuntime(HostRuntime):
    """MindIE's scripts do each whole job. The process level stays the host's, for what the generic parts of a job
    still do by node: remove the user_config.json a failed deploy wrote, tail the coordinator's log when the probe
    fails."""

    name = "mindie-k8s"

    def deploy(self, run: DeploymentRun) -> None:
        mindie_deploy(run)

    def stop(self, run: DeploymentRun) -> None:
        mindie_stop(run)

    def restart(self, run: DeploymentRun, instances: list[str]) -> None:
        raise JobFailed("launch_profile mindie: MindIE's controller restarts its own servers, and a pod is not ours to "
                        "restart; stop and deploy the deployment instead")

    def refresh(self, run: DeploymentRun) -> None:
        mindie_refresh(run)

    def preflight(self, run: DeploymentRun) -> None:
        mindie_preflight(run)


def mindie_deploy(run: DeploymentRun) -> None:
    ctx, plan, m = run.ctx, run.plan, run.plan.mindie
    coordinator = next(p for p in plan.processes if p.role == "proxy")
    # connect, write, deploy_ac_job.py, ready on the deploy host; connect and the probe on the coordinator's node
    steps = Counter({m.deploy_host: 4})
    steps[coordinator.node] += 1 if coordinator.node == m.deploy_host else 2
    run.planned_steps(steps)
    run.connect(list(dict.fromkeys([m.deploy_host, coordinator.node])))
    if _already_running(run, coordinator):
        return
    _write_user_config(run)
    ctx.check_cancel()
    ctx.step(f"deploy: {m.deploy}", node=m.deploy_host)
    for p in plan.processes:
        _record(run, p, None, ProcessState.UNKNOWN, "submitted to Kubernetes; not ready yet")
    run.undeploy = lambda why: mindie_undeploy(run, why)  # what was submitted goes again if the job fails
    result = run.fleet.run(m.deploy_host, m.deploy, timeout=DEPLOY_TIMEOUT_S, stream=True)
    if not result.ok:
        run.fail(m.deploy_host, f"step 'deploy_ac_job.py' failed on {m.deploy_host} (exit {result.exit_status}): "
                 f"{(result.stderr or result.stdout).strip()[-500:]}")
    run.progress(m.deploy_host, "deploy_ac_job.py submitted the jobs")
    pods = _wait_ready(run)
    _record_pods(run, pods)
    answer = probe(run, coordinator)
    ctx.log(f"probe answer: {answer!r}", node=coordinator.node)
    run.done([m.deploy_host, coordinator.node])
    roles = Counter(p.role for p in pods)
    ctx.summary = (f"r{run.revision.number} deployed through MindIE on {m.deploy_host} (namespace {m.job_id}): "
                   f"{roles['prefill']} prefill and {roles['decode']} decode pods, the coordinator on "
                   f"{coordinator.address}:{coordinator.ports[0]}; it answered a completion: {answer!r}")


def _already_running(run: DeploymentRun, coordinator: PlannedProcess) -> bool:
    """A deploy is idempotent: a namespace already serving this revision's user_config.json, ready, is kept; one
    holding anything else (another revision, pods left Failed by a reboot) is taken down before the new submit."""
    ctx, m = run.ctx, run.plan.mindie
    pods = _pods(run)
    if not pods:
        return False
    same = run.fleet.run(m.deploy_host, kube.same_file_command(m.user_config_path, m.user_config), timeout=15).ok
    log = run.fleet.run(m.deploy_host, m.ready, timeout=30)
    ready = log.ok and kube.READY_LINE in log.stdout and all(p.phase == "Running" for p in pods)
    if same and ready:
        ctx.log(f"namespace {m.job_id} already serves this revision's user_config.json and its coordinator is "
                "ready: kept", node=m.deploy_host)
        _record_pods(run, pods)
        for _ in range(3):  # write, submit and ready: nothing to do
            run.progress(m.deploy_host, "kept")
        answer = probe(run, coordinator)
        run.done([m.deploy_host, coordinator.node])
        ctx.summary = (f"r{run.revision.number} already runs through MindIE on {m.deploy_host} (namespace {m.job_id}, "
                       f"{len(pods)} pods): kept; the coordinator answered a completion: {answer!r}")
        return True
    why = "another user_config.json" if not same else "pods not all running or the coordinator not ready"
    ctx.log(f"namespace {m.job_id} holds a MindIE deployment ({why}): taking it down first", node=m.deploy_host,
            stream="stderr")
    left = mindie_undeploy(run, "replace")
    if left:
        run.fail(m.deploy_host, f"delete.sh left {len(left)} pods running in {m.job_id}: "
                 + ", ".join(p.name for p in left))
    return False


def _write_user_config(run: DeploymentRun) -> None:
    m = run.plan.mindie
    path = m.user_config_path
    result = run.fleet.run(m.deploy_host, private_dirs_command([str(path.parent)], files=[path]), timeout=15)
    if not result.ok:
        run.fail(m.deploy_host, f"cannot write {path} on {m.deploy_host}: "
                 f"{result.stderr.strip()[-500:] or f'exit {result.exit_status}'}")
    run.fleet.put_text(m.deploy_host, str(path), m.user_config, mode=0o600)
    run.files_written.add((m.deploy_host, str(path)))
    run.ctx.log(f"wrote {path} ({len(m.user_config.encode())} bytes, mode 0600)", node=m.deploy_host)
    run.progress(m.deploy_host, "user_config.json written")


def _wait_ready(run: DeploymentRun) -> list[kube.Pod]:
    """Polls the coordinator's log for its ready line, telling the pods' progress as it changes."""
    ctx, m = run.ctx, run.plan.mindie
    ctx.step(f"waiting up to {m.ready_timeout_s} s for '{kube.READY_LINE}' in the coordinator's log",
             node=m.deploy_host)
    deadline = time.monotonic() + m.ready_timeout_s
    told = None
    while True:
        ctx.check_cancel()
        pods = _pods(run)
        said = ", ".join(f"{n} {phase}" for phase, n in sorted(Counter(p.phase for p in pods).items()))
        if said != told:
            ctx.log(f"pods: {said or 'none yet'}", node=m.deploy_host)
            told = said
        log = run.fleet.run(m.deploy_host, m.ready, timeout=30)
        if log.ok and kube.READY_LINE in log.stdout:
            line = next(x for x in log.stdout.splitlines() if kube.READY_LINE in x)
            ctx.log(f"coordinator: {line.strip()}", node=m.deploy_host)
            run.progress(m.deploy_host, "the coordinator is ready")
            return pods
        if time.monotonic() > deadline:
            tail = "\n".join((log.stdout or log.stderr).strip().splitlines()[-LOG_LINES_ON_FAILURE:])
            pending = [p.name for p in pods if p.phase != "Running"]
            run.fail(m.deploy_host, f"step 'wait ready' timed out on {m.deploy_host}: no '{kube.READY_LINE}' within "
                     f"{m.ready_timeout_s} s; pods not running: {', '.join(pending) or 'none'}; the coordinator's "
                     f"last log lines:\n{tail or '(none)'}")
        time.sleep(POLL_S)


def _pods(run: DeploymentRun) -> list[kube.Pod]:
    m = run.plan.mindie
    result = run.fleet.run(m.deploy_host, m.pods, timeout=30)
    if not result.ok:
        run.fail(m.deploy_host, f"'{m.pods}' failed on {m.deploy_host}: "
                 f"{result.stderr.strip()[-500:] or f'exit {result.exit_status}'}")
    try:
        return kube.parse_pods(result.stdout)
    except ValueError as exc:
        run.fail(m.deploy_host, f"on {m.deploy_host}: {exc}")


def _record_pods(run: DeploymentRun, pods: list[kube.Pod]) -> None:
    """Each planned pod gets the Kubernetes pod of its role in order, with the node and address it really has;
    a pod placed elsewhere than planned is said, and the coordinator must be where clients are told to go."""
    ctx, plan = run.ctx, run.plan
    by_address = {n.address: name for name, n in run.nodes.items()}
    for role in ("prefill", "decode", "proxy"):
        planned = [p for p in plan.processes if p.role == role]
        actual = sorted((p for p in pods if p.role == ("coordinator" if role == "proxy" else role)),
                        key=lambda p: kube.natural_key(p.name))
        if len(actual) != len(planned):
            run.fail(plan.mindie.deploy_host, f"Kubernetes runs {len(actual)} {role} pods, the topology plans "
                     f"{len(planned)}: {', '.join(p.name for p in actual) or 'none'}")
        for want, pod in zip(planned, actual, strict=True):
            node = by_address.get(pod.ip) or pod.node
            if pod.ip != want.address:
                if role == "proxy":
                    run.fail(plan.mindie.deploy_host, f"the coordinator pod {pod.name} runs on {node} ({pod.ip}), "
                             f"but proxy.node is {want.node} ({want.address}), where clients are sent: pin the "
                             f"coordinator to {want.node}, or set proxy.node: {node}")
                ctx.log(f"{want.key}: Kubernetes placed pod {pod.name} on {node} ({pod.ip}), the plan expected "
                        f"{want.node}", node=plan.mindie.deploy_host, stream="stderr")
            _record(run, want, pod, ProcessState.RUNNING, f"pod {pod.name} on {node}")


def _record(run: DeploymentRun, p: PlannedProcess, pod: kube.Pod | None, state: ProcessState, detail: str) -> None:
    node = (pod and next((n for n, f in run.nodes.items() if f.address == pod.ip), None)) or p.node
    m = run.plan.mindie
    row, _ = Process.objects.update_or_create(deployment=run.deployment, key=p.key, defaults=dict(
        revision=run.revision, node=run.nodes.get(node), node_name=node, role=p.role, instance=p.instance or "",
        address=pod.ip if pod else p.address, ports=list(pod.ports if pod and pod.ports else p.ports),
        health_url="", pid=None, command=f"{m.deploy}  # pod {pod.name if pod else '(not placed yet)'}",
        fingerprint=fingerprint(p), log_path=kube.pod_log_path(m.deploy_host, m.job_id, pod.name) if pod else "",
        pid_file="", state=state, state_detail=detail, last_job=run.ctx.job))
    run.rows[p.key] = row  # as DeploymentRun.record keeps them: one write per pod, no re-read of every row


def mindie_undeploy(run: DeploymentRun, why: str) -> list[kube.Pod]:
    """delete.sh, then the pods left in the namespace (none, when it worked)."""
    m = run.plan.mindie
    run.ctx.step(f"{why}: {m.delete}", node=m.deploy_host)
    result = run.fleet.run(m.deploy_host, m.delete, timeout=DEPLOY_TIMEOUT_S, stream=True)
    if not result.ok:
        raise JobFailed(f"delete.sh failed on {m.deploy_host} (exit {result.exit_status}): "
                        f"{(result.stderr or result.stdout).strip()[-500:]}; the pods may still run")
    deadline = time.monotonic() + 60
    while (left := [p for p in _pods(run) if p.phase in ("Running", "Pending")]) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return left


def mindie_stop(run: DeploymentRun) -> None:
    ctx, m = run.ctx, run.plan.mindie
    run.planned_steps(Counter({m.deploy_host: 3}))
    run.connect([m.deploy_host])
    left = mindie_undeploy(run, "stop")
    run.progress(m.deploy_host, "delete.sh ran")
    if left:
        raise JobFailed(f"delete.sh ran, but {len(left)} pods still run in {m.job_id}: "
                        + ", ".join(p.name for p in left))
    run.progress(m.deploy_host, "no pod left")
    for key, row in run.rows.items():
        if row.state != ProcessState.STOPPED:
            run.mark(key, ProcessState.STOPPED, f"deleted with namespace {m.job_id}")
    gone = run.fleet.run(m.deploy_host, remove_files_command([str(m.user_config_path)]), timeout=20)
    if not gone.ok:
        ctx.log(f"could not remove {m.user_config_path}: {gone.stderr.strip()[-300:]}", node=m.deploy_host,
                stream="error")
    run.done([m.deploy_host], "stopped")
    ctx.summary = f"stopped: delete.sh removed namespace {m.job_id} on {m.deploy_host}; no pod is left"


def mindie_refresh(run: DeploymentRun) -> None:
    """Reads the pods back into the rows: a planned pod whose Kubernetes pod runs is running, one with none is
    stopped (the namespace is gone) or unknown (it is there, not running)."""
    ctx, m = run.ctx, run.plan.mindie
    run.planned_steps(Counter({m.deploy_host: 2}))
    run.connect([m.deploy_host])
    pods = _pods(run)
    run.progress(m.deploy_host, f"{len(pods)} pods read")
    by_role = {role: sorted((p for p in pods if p.role == role), key=lambda p: kube.natural_key(p.name))
               for role in ("prefill", "decode", "coordinator")}
    states = Counter()
    for role in ("prefill", "decode", "proxy"):
        actual = iter(by_role["coordinator" if role == "proxy" else role])
        for want in (p for p in run.plan.processes if p.role == role):
            pod = next(actual, None)
            if pod is None:
                state, detail = ProcessState.STOPPED, f"no {role} pod left in namespace {m.job_id}"
            elif pod.phase == "Running":
                state, detail = ProcessState.RUNNING, f"pod {pod.name} {pod.phase}"
            else:
                state, detail = ProcessState.UNKNOWN, f"pod {pod.name} {pod.phase}"
            _record(run, want, pod if state == ProcessState.RUNNING else None, state, detail)
            states[state] += 1
    run.done([m.deploy_host], "read")
    ctx.summary = "read the pods back: " + ", ".join(f"{n} {s}" for s, n in states.items())


def mindie_preflight(run: DeploymentRun) -> None:
    """The deploy host can run what a deploy runs: python3, kubectl and bash on the login PATH, MindIE's deploy
    scripts where the spec says, a usable run dir and disk for user_config.json."""
    ctx, m = run.ctx, run.plan.mindie
    run.planned_steps(Counter({m.deploy_host: 2}))
    run.connect([m.deploy_host])
    script = remote.preflight_script(binaries=["python3", "kubectl", "bash"], run_dir=run.spec.run_dir, npu=False)
    result = run.fleet.run(m.deploy_host, f"{script}; echo @@scripts; {kube.scripts_check_command(m.scripts_dir)}; "
                                          f"echo @@owner; ({kube.scripts_dir_guard(m.scripts_dir)}) 2>&1 && echo ok",
                           timeout=60)
    sections = remote.split_sections(result.stdout)
    problems = [f"`{line.split()[1]}` is not on the login PATH" for line in sections.get("binaries", "").splitlines()
                if line.startswith("missing ")]
    problems += [f"{m.scripts_dir}/{line.split()[1]} is missing: scripts_dir must be MindIE's "
                 "kubernetes_deploy_scripts directory" for line in sections.get("scripts", "").splitlines()
                 if line.startswith("missing ")]
    owner = sections.get("owner", "").strip()
    if owner != "ok" and not any(line.startswith("missing ") for line in sections.get("scripts", "").splitlines()):
        problems.append(f"MindIE's scripts directory would be refused: {owner.removeprefix('pdcp: ') or 'no answer'}")
    rundir = sections.get("rundir", "").strip()
    if remote.RUN_DIR_OK not in rundir.splitlines():
        problems.append(f"run_dir {run.spec.run_dir} would be refused: {rundir or 'no answer'}")
    if problems:
        for text in problems:
            ctx.log(text, node=m.deploy_host, stream="error")
        run.fail(m.deploy_host, f"preflight found {len(problems)} problems on {m.deploy_host}: " + "; ".join(problems))
    run.progress(m.deploy_host, "all checks passed")
    run.done([m.deploy_host], "all checks passed")
    ctx.summary = (f"preflight passed on {m.deploy_host}: python3, kubectl, bash, MindIE's deploy scripts in "
                   f"{m.scripts_dir} (root's, writable by no one else), run dir {run.spec.run_dir}")
