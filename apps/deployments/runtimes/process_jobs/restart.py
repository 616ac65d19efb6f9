"""The restart jobs, process by process: one instance, or every instance of a role one after another (rolling),
each drained in the proxy while it is down when the proxy runs."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from apps.jobs.context import JobFailed
from sshexec import probe_commands as remote

from ...topology import PlannedProcess, admin_header_path
from ..health_gate import wait_healthy
from ..run_items import item_of

if TYPE_CHECKING:
    from ...jobs.deployment_run import DeploymentRun


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


def restart(run: DeploymentRun, instances: list[str]) -> None:
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

