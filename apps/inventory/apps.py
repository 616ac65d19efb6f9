from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "apps.inventory"
    label = "inventory"

    def ready(self):
        from . import discovery  # noqa: F401  registers the discover job handler
