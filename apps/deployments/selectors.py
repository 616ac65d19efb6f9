"""Deployment reads for pages and the API: a constant number of queries whatever the number of rows."""

from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from .choices import ProcessState
from .models import Deployment, Process, Revision


def deployments_with_summary():
    # At most one active revision, so no order: Revision's Meta ordering (by the deployment's name) would join inside
    # the subquery each time it compiles, which two request threads sharing the viewset's queryset can interleave.
    active = Revision.objects.filter(deployment=OuterRef("pk"), is_active=True).order_by()
    running = (Process.objects.filter(deployment=OuterRef("pk"), state=ProcessState.RUNNING)
               .order_by().values("deployment").annotate(n=Count("pk")).values("n"))
    revisions = (Revision.objects.filter(deployment=OuterRef("pk"))
                 .order_by().values("deployment").annotate(n=Count("pk")).values("n"))
    return (Deployment.objects.select_related("cluster", "created_by")
            .annotate(active_number=Subquery(active.values("number")[:1]),
                      active_id=Subquery(active.values("pk")[:1]),
                      launch_profile=Subquery(active.values("launch_profile")[:1]),
                      served_model=Subquery(active.values("served_model")[:1]),
                      revision_count=Coalesce(Subquery(revisions, output_field=IntegerField()), Value(0)),
                      running_count=Coalesce(Subquery(running, output_field=IntegerField()), Value(0)))
            .order_by("name"))


def revisions_of(deployment):
    return Revision.objects.filter(deployment=deployment).select_related("created_by").order_by("-number")


def processes_of(deployment):
    # prefetch, not join, the revision: one row (and one parse of its spec) per revision, not per process
    return (Process.objects.filter(deployment=deployment).select_related("node").prefetch_related("revision")
            .order_by("role", "key"))
