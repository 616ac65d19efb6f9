"""The stop job: stop everything of the deployment, as the plan's runtime does it (runtimes/). Runs even when the
revision no longer validates, and tells which processes may still run on nodes it could not reach."""

from __future__ import annotations

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext
from apps.jobs.registry import job_handler

from .deployment_run import DeploymentRun


@job_handler(JobKind.STOP)
def stop(ctx: JobContext) -> None:
    run = DeploymentRun(ctx, strict=False)
    try:
        run.runtime.stop(run)
    finally:
        run.close()
