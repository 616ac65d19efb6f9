from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "apps.telemetry"
    label = "telemetry"

    def ready(self):
        from .ecosystem.selfmetrics import watch_ssh_connections

        watch_ssh_connections()  # every process (web, worker, a forked worker child) publishes its SSH connections
