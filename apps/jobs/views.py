"""Job pages: the list, one job with its live log, and cancelling it."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import operator_required, viewer_required

from .models import Job
from .services import JobStateError, job_cancel
from .waiting import job_waiting


@viewer_required
def job_list(request):
    page = Paginator(Job.objects.select_related("created_by"), 50).get_page(request.GET.get("page"))
    return render(request, "jobs/job_list.html", {"page": page})


@viewer_required
def job_detail(request, pk):
    job = get_object_or_404(Job.objects.select_related("created_by"), pk=pk)
    return render(request, "jobs/job_detail.html", {"job": job, "summaries": job.node_summaries.all(),
                                                    "waiting": job_waiting(job)})


@require_POST
@operator_required
def job_cancel_action(request, pk):
    job = get_object_or_404(Job, pk=pk)
    try:
        job_cancel(job, user=request.user)
        messages.info(request, "cancel requested")
    except JobStateError as exc:
        messages.error(request, str(exc))
    return redirect("jobs:detail", pk=job.pk)
