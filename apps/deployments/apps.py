from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "apps.deployments"
    label = "deployments"

    def ready(self):
        from . import jobs  # noqa: F401  registers the preflight, deploy, stop and restart job handlers
