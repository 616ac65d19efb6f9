import threading
import time

import django_filters
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from apps.accounts.api_errors import Conflict, error_response
from apps.accounts.roles import Role

from ..choices import JobStatus
from ..models import Job, JobEvent
from ..services import JobStateError, job_cancel
from ..workers import RegistryUnavailable, queue_status
from .serializers import JobEventSerializer, JobSerializer, QueueStatusSerializer

MAX_WAIT_SECONDS = 60
WAIT_POLL_SECONDS = 0.5
# Each waiting request holds a thread (daphne runs sync views in a thread of the request's own) and a database
# connection for up to MAX_WAIT_SECONDS; past this many at once a request answers at once, as without ?wait.
MAX_WAITERS = 16
_waiters = threading.BoundedSemaphore(MAX_WAITERS)
STILL_GOING = (JobStatus.PENDING, JobStatus.RUNNING)


class JobFilterSet(django_filters.FilterSet):
    class Meta:
        model = Job
        fields = ["kind", "status", "target_type", "target_id"]


class EventPagination(api_settings.DEFAULT_PAGINATION_CLASS):  # the API's (bad limit/offset are 400s), larger
    default_limit = 500
    max_limit = 5000


def wait_seconds(raw: str | None) -> int:
    if raw is None or raw == "":
        return 0
    if not raw.isdecimal() or int(raw) > MAX_WAIT_SECONDS:
        raise serializers.ValidationError({"wait": [f"expected whole seconds from 0 to {MAX_WAIT_SECONDS}, "
                                                    f"got {raw!r}"]})
    return int(raw)


def wait_until_done(job_id: int, seconds: int) -> None:
    """Returns when the job is no longer pending or running, or after `seconds`: one indexed status read every
    WAIT_POLL_SECONDS, so a waiter costs the database two small queries a second at most."""
    if seconds <= 0 or not _waiters.acquire(blocking=False):
        return
    try:
        deadline = time.monotonic() + seconds
        while Job.objects.filter(pk=job_id, status__in=STILL_GOING).exists():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(WAIT_POLL_SECONDS, left))
    finally:
        _waiters.release()


class JobViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Job.objects.select_related("created_by").prefetch_related("node_summaries")
    serializer_class = JobSerializer
    filterset_class = JobFilterSet
    search_fields = ["target_label"]
    action_query_params = {"retrieve": ["wait"], "events": ["counter__gt"]}
    role_for_action = {"cancel": Role.OPERATOR}

    @extend_schema(parameters=[OpenApiParameter(
        "wait", int, description=f"hold the answer until the job is no longer pending or running, at most this "
                                 f"many seconds (0-{MAX_WAIT_SECONDS}); the job as it is then")])
    def retrieve(self, request, *args, **kwargs):
        """One job. With ?wait=N the answer comes when the job ends or after N s, whichever is first (a sync wait:
        it holds one thread and one database connection; at most MAX_WAITERS at once, beyond that it answers
        at once)."""
        seconds = wait_seconds(request.query_params.get("wait"))
        job = self.get_object()
        if seconds and job.status in STILL_GOING:
            wait_until_done(job.pk, seconds)
            job = self.get_object()
        return Response(self.get_serializer(job).data)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None, format=None):
        try:
            job = job_cancel(self.get_object(), user=request.user)
        except JobStateError as exc:
            raise Conflict(str(exc)) from None
        return Response(JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(parameters=[OpenApiParameter("counter__gt", int, description="only events after this counter")],
                   responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=EventPagination, filterset_class=None)
    def events(self, request, pk=None, format=None):
        job = self.get_object()
        events = JobEvent.objects.filter(job=job).order_by("counter")
        after = request.query_params.get("counter__gt")
        if after is not None:
            try:
                after = int(after)
            except ValueError:
                raise serializers.ValidationError({"counter__gt": ["expected a whole number"]}) from None
            events = events.filter(counter__gt=after)
        page = self.paginate_queryset(events)
        return self.get_paginated_response(JobEventSerializer(page, many=True).data)


class WorkersView(APIView):
    @extend_schema(responses={200: QueueStatusSerializer(many=True),
                              503: OpenApiResponse(description="the worker registry (Redis) cannot be read")})
    def get(self, request):
        """Each queue of this installation with how many live Celery workers consume it and when one was last
        seen; a worker refreshes its entry every few seconds while it runs (apps/jobs/workers.py)."""
        from datetime import UTC, datetime

        try:
            rows = queue_status()
        except RegistryUnavailable as exc:
            return error_response(f"the worker registry cannot be read: {exc}", status.HTTP_503_SERVICE_UNAVAILABLE)
        for row in rows:
            seen = row["last_seen"]
            row["last_seen"] = datetime.fromtimestamp(seen, UTC).isoformat() if seen is not None else None
        return Response(rows)
