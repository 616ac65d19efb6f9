from django.apps import AppConfig


class UiConfig(AppConfig):
    name = "apps.ui"
    label = "ui"
