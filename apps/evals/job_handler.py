"""The evaluate job: thin, it finds the run and hands it to execution."""

from apps.jobs.choices import JobKind
from apps.jobs.context import JobContext, JobFailed
from apps.jobs.registry import job_handler

from .models import EvalRun


@job_handler(JobKind.EVALUATE)
def evaluate(ctx: JobContext) -> None:
    run = EvalRun.objects.select_related("deployment__cluster").filter(pk=ctx.job.target_id).first()
    if run is None:
        raise JobFailed(f"eval run #{ctx.job.target_id} was deleted before it ran")
    from .execution import execute  # the AISBench driver loads only in the worker that runs evals

    execute(ctx, run)
