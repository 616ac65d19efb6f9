"""The refresh job ("Read state from nodes"): make the Process rows say what the plan's runtime finds on the nodes
(runtimes/). It starts and stops nothing. Queued by itself when a deploy, stop or restart loses its worker
(services.refresh_after_lost_worker), or by an operator."""

from __future__ import annotations

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext
from apps.jobs.registry import job_handler

from .deployment_run import DeploymentRun


@job_handler(JobKind.REFRESH)
def refresh(ctx: JobContext) -> None:
    run = DeploymentRun(ctx, strict=False)
    try:
        run.runtime.refresh(run)
    finally:
        run.close()
