"""Prints this installation's Celery queue names (PDCP_NAMESPACE) for a worker's -Q: all of them, or one kind."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Print the namespaced Celery queue names, comma-separated (e.g. celery worker -Q \"$(... telemetry)\")."

    def add_arguments(self, parser):
        parser.add_argument("kinds", nargs="*", help="any of ssh, telemetry, evals (default: all)")

    def handle(self, *args, kinds, **options):
        known = settings.PDCP_QUEUES
        unknown = [k for k in kinds if k not in known]
        if unknown:
            raise CommandError(f"unknown queue kind {', '.join(unknown)}: choose from {', '.join(known)}")
        self.stdout.write(",".join(known[k] for k in kinds or known))
