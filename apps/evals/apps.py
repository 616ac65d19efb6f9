from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "apps.evals"
    label = "evals"

    def ready(self):
        from . import job_handler  # noqa: F401  registers the evaluate job handler
