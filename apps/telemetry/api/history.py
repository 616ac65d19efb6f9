"""GET /api/deployments/<id>/history/?subject=inst:p0&window=1h: one subject's history series (history/selectors.py)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.deployments.models import Deployment

from ..history import WINDOWS, series, subjects
from ..history.selectors import has_subject, process_subjects
from ..models import HistoryTier


class HistorySeriesSerializer(serializers.Serializer):
    subject = serializers.CharField(help_text="inst:<name>, a service process key (proxy, kv-pool), or pool")
    window_s = serializers.IntegerField()
    tier = serializers.ChoiceField(choices=HistoryTier.values, help_text="the tier the points come from: the "
                                                                         "finest one kept for the whole window")
    step_s = serializers.IntegerField(help_text="seconds between two points of that tier")
    at = serializers.ListField(child=serializers.CharField(), help_text="ISO-8601 UTC times, oldest first")
    series = serializers.DictField(child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
                                   help_text="per field, one value per entry of `at` (null: not measured then)")


class DeploymentHistoryView(generics.GenericAPIView):
    queryset = Deployment.objects.all()
    serializer_class = HistorySeriesSerializer
    filter_backends = []  # one deployment by id: the deployment list's filters have nothing to do here
    pagination_class = None
    query_params = ("subject", "window", "format")

    @extend_schema(operation_id="deployments_history_retrieve", responses={200: HistorySeriesSerializer},
                   parameters=[OpenApiParameter("subject", str, required=True,
                                                description="whose history: inst:<name> (inst:p0), a service "
                                                            "process key (proxy, kv-pool) or pool"),
                               OpenApiParameter("window", str, required=True, enum=list(WINDOWS),
                                                description="how far back from now")])
    def get(self, request, pk=None, format=None):
        """The subject's numbers over the window, one column per field: raw rounds for up to an hour, 1-minute
        points for up to a day, 10-minute points beyond."""
        unknown = sorted(set(request.query_params) - set(self.query_params))
        if unknown:
            raise ValidationError({name: ["unknown query parameter; known here: subject, window"] for name in unknown})
        deployment = self.get_object()
        errors = {}
        window = request.query_params.get("window", "")
        if window not in WINDOWS:
            errors["window"] = [f"{'unknown window ' + repr(window) if window else 'required'}; "
                                f"choose one of {', '.join(WINDOWS)}"]
        subject = request.query_params.get("subject", "")
        if not subject:
            errors["subject"] = ["required: inst:<name>, a service process key (proxy, kv-pool) or pool"]
        if errors:
            raise ValidationError(errors)
        answer = series(deployment, subject, window_s=WINDOWS[window])
        if not answer["at"] and not has_subject(deployment, subject) and not process_subjects(deployment, {subject}):
            known = subjects(deployment)
            shown = ", ".join(known[:12]) + (f" ({len(known)} in all)" if len(known) > 12 else "")
            raise ValidationError({"subject": [f"no history of {subject!r} in this deployment; known: "
                                               f"{shown or 'none yet'}"]})
        return Response(answer)
