"""The shell's own page: the dashboard over every cluster and the latest jobs (login and logout are Django's)."""

from django.shortcuts import render

from apps.accounts.access import viewer_required
from apps.inventory.selectors import clusters_with_counts
from apps.jobs.models import Job


@viewer_required
def dashboard(request):
    return render(request, "ui/dashboard.html", {
        "clusters": clusters_with_counts(),
        "jobs": Job.objects.select_related("created_by")[:10],
    })
