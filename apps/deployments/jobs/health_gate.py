"""The gates a deploy or restart passes before it goes on: every process of a stage answering its health check,
and one completion through the proxy at the end."""

from __future__ import annotations

import json
import time

from sshexec import probe_commands as remote

from ..choices import ProcessState
from ..topology import PlannedProcess
from .deployment_run import DeploymentRun
from .run_items import item_of

PROBE_ATTEMPTS_SECONDS = 20


def wait_healthy(run: DeploymentRun, procs: list[PlannedProcess]) -> None:
    timeout = run.options.health_timeout
    pending = {p.key: p for p in procs if p.health_url}
    if not pending:
        return
    run.ctx.step(f"waiting up to {timeout}s for {len(pending)} processes to answer their health check")
    deadline = time.monotonic() + timeout
    delay = 0.1
    while pending:
        run.ctx.check_cancel()
        items = [item_of(p) for p in pending.values()]
        for key, (state, pid, healthy) in run.states(items, probe=True).items():
            p = pending[key]
            if state != "running":
                detail = f"exited before it became healthy ({state}{f' pid {pid}' if pid else ''})"
                run.mark(key, ProcessState.FAILED, detail)
                run.fail(p.node, f"step 'wait healthy' failed on {p.node}: {p.key} {detail}", item=item_of(p))
            if healthy:
                del pending[key]
                run.ctx.log(f"{key} healthy ({p.health_url})", node=p.node)
                run.progress(p.node, f"{key} healthy")
        if pending and time.monotonic() > deadline:
            first = next(iter(pending.values()))
            run.mark(first.key, ProcessState.FAILED, f"not healthy after {timeout}s")
            run.fail(first.node, f"step 'wait healthy' timed out on {first.node}: {', '.join(pending)} did "
                      f"not answer {first.health_url} within {timeout}s", item=item_of(first))
        if pending:
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

def probe(run: DeploymentRun, proxy: PlannedProcess) -> str:
    model = run.spec.model.served_name
    run.ctx.step(f"probe: one /v1/completions request for {model} through the proxy", node=proxy.node)
    command = remote.completion_probe_command(address=proxy.address, port=proxy.ports[0], model=model)
    deadline = time.monotonic() + PROBE_ATTEMPTS_SECONDS
    while True:
        run.ctx.check_cancel()
        result = run.fleet.run(proxy.node, command, timeout=90)
        code, body = remote.split_http(result.stdout)
        if result.ok and code == 200:
            try:
                text = json.loads(body)["choices"][0]["text"]
            except (ValueError, KeyError, IndexError, TypeError):
                run.fail(proxy.node, f"step 'probe' on {proxy.node}: the proxy answered 200 but not a completion: "
                          f"{body[:300]}")
            run.progress(proxy.node, "probe answered")
            return text
        if time.monotonic() > deadline:
            run.fail(proxy.node, f"step 'probe' failed on {proxy.node}: HTTP {code or 'none'} "
                      f"{(body or result.stderr).strip()[:300]}", item=item_of(proxy))
        time.sleep(1)
