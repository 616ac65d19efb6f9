from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "apps.evals"
    label = "evals"

    def ready(self):
        from apps.jobs.signals import job_ended

        from . import job_handler  # noqa: F401  registers the evaluate job handler
        from .services import eval_follow_job_end

        job_ended.connect(lambda sender, job, **kw: eval_follow_job_end(job), weak=False,
                          dispatch_uid="evals-follow-job-end")
