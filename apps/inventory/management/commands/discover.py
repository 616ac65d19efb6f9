"""manage.py discover NODE: run discovery on a node now, printing the job's log as it goes."""

from django.core.management.base import BaseCommand, CommandError

from apps.inventory.models import Node
from apps.inventory.services import node_discover
from apps.jobs.models import JobEvent
from apps.jobs.runner import run_job


class Command(BaseCommand):
    help = "Discover the NPUs of a node over SSH (runs the job in this process and prints its log)."

    def add_arguments(self, parser):
        parser.add_argument("node", help="node name")
        parser.add_argument("--cluster", help="cluster name, when the node name is not unique")

    def handle(self, *args, node, cluster=None, **options):
        nodes = Node.objects.select_related("cluster").filter(name=node)
        if cluster:
            nodes = nodes.filter(cluster__name=cluster)
        found = list(nodes)
        if not found:
            raise CommandError(f"no node named {node!r}" + (f" in cluster {cluster!r}" if cluster else ""))
        if len(found) > 1:
            raise CommandError(f"{len(found)} nodes are named {node!r}: add --cluster "
                               f"({', '.join(n.cluster.name for n in found)})")
        job = node_discover(found[0], user=None)
        run_job(job.pk)
        job.refresh_from_db()
        for event in JobEvent.objects.filter(job=job).order_by("counter"):
            self.stdout.write(f"[{event.stream}] {event.text}")
        if job.status != "successful":
            raise CommandError(f"discovery {job.status}: {job.explanation}")
        self.stdout.write(self.style.SUCCESS(job.explanation))
