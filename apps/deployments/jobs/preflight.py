"""The preflight job: check that the nodes can run the plan, as the plan's runtime checks it (runtimes/): nothing is
started or written."""

from __future__ import annotations

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext
from apps.jobs.registry import job_handler

from .deployment_run import DeploymentRun


@job_handler(JobKind.PREFLIGHT)
def preflight(ctx: JobContext) -> None:
    run = DeploymentRun(ctx)
    try:
        run.runtime.preflight(run)
    finally:
        run.close()
