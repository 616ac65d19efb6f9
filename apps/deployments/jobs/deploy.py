"""The deploy job: reconcile the nodes with the revision's plan, as the plan's runtime does it (runtimes/; for
processes: stop what the plan no longer has, keep what runs as planned, start the rest stage by stage with a health
gate, then one completion through the proxy)."""

from __future__ import annotations

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext
from apps.jobs.registry import job_handler

from .deployment_run import DeploymentRun, guarded


@job_handler(JobKind.DEPLOY)
def deploy(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    guarded(run, lambda: run.runtime.deploy(run))
