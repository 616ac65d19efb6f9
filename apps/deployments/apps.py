from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "apps.deployments"
    label = "deployments"

    def ready(self):
        from apps.jobs.signals import job_orphaned

        from . import jobs  # noqa: F401  registers the preflight, deploy, stop, restart and refresh job handlers
        from .services import refresh_after_lost_worker

        job_orphaned.connect(lambda sender, job, **kw: refresh_after_lost_worker(job), weak=False,
                             dispatch_uid="deployments-refresh-after-lost-worker")
