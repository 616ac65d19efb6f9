"""The one answer of an API action that starts a job: 202 Accepted, Location the job's URL, and the job (or the
object the action made, e.g. an eval run) with links to the job and its events."""

from django.urls import reverse
from rest_framework import status
from rest_framework.response import Response

from ..models import Job
from .serializers import JobSerializer


def job_started(job: Job, data: dict | None = None) -> Response:
    """`data` defaults to the job itself; give another body (say, the run the job serves) to answer with that."""
    return Response(JobSerializer(job).data if data is None else data, status=status.HTTP_202_ACCEPTED,
                    headers={"Location": reverse("job-detail", args=[job.pk])})
