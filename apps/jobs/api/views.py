import django_filters
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

from apps.accounts.roles import Role

from ..models import Job, JobEvent
from ..services import JobStateError, job_cancel
from .serializers import JobEventSerializer, JobSerializer


class JobFilterSet(django_filters.FilterSet):
    class Meta:
        model = Job
        fields = ["kind", "status", "target_type", "target_id"]


class EventPagination(LimitOffsetPagination):
    default_limit = 500
    max_limit = 5000


class JobViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Job.objects.select_related("created_by").prefetch_related("node_summaries")
    serializer_class = JobSerializer
    filterset_class = JobFilterSet
    role_for_action = {"cancel": Role.OPERATOR}

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        try:
            job = job_cancel(self.get_object(), user=request.user)
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(parameters=[OpenApiParameter("counter__gt", int, description="only events after this counter")],
                   responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=EventPagination, filterset_class=None)
    def events(self, request, pk=None):
        job = self.get_object()
        events = JobEvent.objects.filter(job=job).order_by("counter")
        after = request.query_params.get("counter__gt")
        if after is not None:
            try:
                after = int(after)
            except ValueError:
                return Response({"counter__gt": ["expected a whole number"]}, status=status.HTTP_400_BAD_REQUEST)
            events = events.filter(counter__gt=after)
        page = self.paginate_queryset(events)
        return self.get_paginated_response(JobEventSerializer(page, many=True).data)
