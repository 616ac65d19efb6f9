"""The restart jobs: one instance, or every instance of a role one after another (rolling), as the plan's runtime
restarts them (runtimes/)."""

from __future__ import annotations

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext
from apps.jobs.registry import job_handler

from .deployment_run import DeploymentRun, guarded


@job_handler(JobKind.RESTART)
def restart(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    guarded(run, lambda: run.runtime.restart(run, [ctx.job.params["instance"]]))


@job_handler(JobKind.ROLLING_RESTART)
def rolling_restart(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    role = ctx.job.params["role"]
    names = [i.name for i in run.spec.instances if i.role == role]
    guarded(run, lambda: run.runtime.restart(run, names))
