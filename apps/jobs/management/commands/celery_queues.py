"""Prints this installation's Celery queue names (PDCP_NAMESPACE) for a worker's -Q: all of them, or one kind."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.namespace import QUEUE_KINDS, queue_name


class Command(BaseCommand):
    help = "Print the namespaced Celery queue names, comma-separated (e.g. celery worker -Q \"$(... telemetry)\")."

    def add_arguments(self, parser):
        parser.add_argument("kinds", nargs="*", help=f"any of {', '.join(QUEUE_KINDS)} (default: all)")

    def handle(self, *args, kinds, **options):
        unknown = [k for k in kinds if k not in QUEUE_KINDS]
        if unknown:
            raise CommandError(f"unknown queue kind {', '.join(unknown)}: choose from {', '.join(QUEUE_KINDS)}")
        self.stdout.write(",".join(queue_name(settings.PDCP_NAMESPACE, k) for k in kinds or QUEUE_KINDS))
