"""The restart jobs: one instance, or every instance of a role one after another (rolling), each drained in the
proxy while it is down when the proxy runs."""

from __future__ import annotations

from collections import Counter

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext, JobFailed
from apps.jobs.registry import job_handler
from sshexec import probe_commands as remote

from ..runtimes.health_gate import wait_healthy
from ..runtimes.run_items import item_of
from ..topology import PlannedProcess, admin_header_path
from .deployment_run import DeploymentRun, guarded


@job_handler(JobKind.RESTART)
def restart(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    guarded(run, lambda: _restart(run, [ctx.job.params["instance"]]))


@job_handler(JobKind.ROLLING_RESTART)
def rolling_restart(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    role = ctx.job.params["role"]
    names = [i.name for i in run.spec.instances if i.role == role]
    guarded(run, lambda: _restart(run, names))


def _proxy_admin(run: DeploymentRun, proxy: PlannedProcess, p: PlannedProcess, action: str) -> None:
    argv = proxy.launch.argv  # the admin listener the running proxy was started with
    command = remote.proxy_admin_command(admin_host=argv[argv.index("--admin-host") + 1],
                                         admin_port=run.spec.proxy.admin_port,
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
    if plan.mindie:
        raise JobFailed("launch_profile mindie: MindIE's controller restarts its own servers, and a pod is not ours to "
                        "restart; stop and deploy the deployment instead")
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
        failures = run.stop([item_of(p) for p in group], why=f"restart {name}")
        if failures:
            raise JobFailed(f"instance {name} could not be stopped, so it was not started again (a second copy "
                            "would orphan the first): " + "; ".join(f"{i.key} on {i.node}: {why}"
                                                                    for i, why in failures))
        run.started = []  # a failure from here on stops this instance's new processes only
        run.start(group)
        wait_healthy(run, group)
        if proxy_up:
            for p in group:
                _proxy_admin(run, proxy, p, "undrain")
        run.started = []
    run.done(steps)
    ctx.summary = f"restarted {', '.join(instances)}{' (drained in the proxy while down)' if proxy_up else ''}"

