"""Evals API: runs (create, cancel, resume, samples), the comparison of runs, sweeps, and datasets (upload)."""

import django_filters
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api_errors import Conflict
from apps.accounts.roles import Role
from apps.inventory.api.filters import IdOrNameFilter
from apps.jobs.api.responses import job_started

from ..datasets import MAX_UPLOAD_BYTES, dataset_choice, dataset_choices
from ..models import EvalRun, EvalSweep
from ..run_settings import BadRunSettings, known_names
from ..selectors import compare_runs, runs_list, samples_of
from ..services import (
    EvalStateError,
    eval_cancel,
    eval_dataset_upload,
    eval_resume,
    eval_run_create,
    eval_sweep_create,
)
from .serializers import (
    ComparisonSerializer,
    DatasetSerializer,
    DatasetUploadSerializer,
    EvalRunCreateSerializer,
    EvalRunDetailSerializer,
    EvalRunSerializer,
    EvalSampleSerializer,
    EvalSweepCreateSerializer,
    EvalSweepDetailSerializer,
    EvalSweepSerializer,
    settings_errors,
)

BAD_SETTINGS = OpenApiResponse(description="a field is invalid: each error names it by its path in the body, "
                                           "run settings' own under settings (settings.dataset)")
NOT_NOW = OpenApiResponse(description="the action does not fit the run's state (detail says why)")
MAX_COMPARED = 10


def bad_settings(exc: BadRunSettings) -> ValidationError:
    """The service's errors placed where the body had them: run settings under "settings" (so the Error shape names
    them settings.<name>), the rest at the top."""
    errors, nested = {}, {}
    for name, messages in settings_errors(exc).items():
        (nested if name in known_names() else errors)[name] = messages
    if nested:
        errors["settings"] = nested
    return ValidationError(errors)


class EvalRunFilterSet(django_filters.FilterSet):
    deployment = IdOrNameFilter(field_name="deployment")

    class Meta:
        model = EvalRun
        fields = ["deployment", "status", "mode", "sweep", "dataset_key"]


class EvalRunViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = EvalRun.objects.select_related("created_by").defer("perf_requests")
    serializer_class = EvalRunSerializer
    filterset_class = EvalRunFilterSet
    ordering_fields = ["created", "accuracy", "concurrency"]
    search_fields = ["deployment_name", "dataset_key"]
    action_query_params = {"retrieve": ["include"]}
    write_role = Role.OPERATOR

    def get_queryset(self):
        if self.action == "list":
            return runs_list()
        if self.action == "retrieve" and self.request.query_params.get("include") == "requests":
            return EvalRun.objects.select_related("created_by")
        return super().get_queryset()

    def get_serializer_class(self):
        return EvalRunSerializer if self.action == "list" else EvalRunDetailSerializer

    def get_serializer_context(self):
        return {**super().get_serializer_context(),
                "include_requests": self.request.query_params.get("include") == "requests"}

    def _detail(self, run: EvalRun, code=status.HTTP_200_OK) -> Response:
        run = EvalRun.objects.select_related("created_by").defer("perf_requests").get(pk=run.pk)
        return Response(EvalRunDetailSerializer(run, context={"request": self.request}).data, status=code)

    def _started(self, run: EvalRun) -> Response:
        """202, Location the run's job: the run is the body, links.job the job to wait on."""
        run = EvalRun.objects.select_related("created_by", "job").defer("perf_requests").get(pk=run.pk)
        return job_started(run.job, EvalRunDetailSerializer(run, context={"request": self.request}).data)

    @extend_schema(parameters=[OpenApiParameter("include", str, enum=["requests"],
                                                description="requests: add perf_requests (one entry per request)")])
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(request=EvalRunCreateSerializer, responses={202: EvalRunDetailSerializer, 400: BAD_SETTINGS})
    def create(self, request, *args, **kwargs):
        """Evaluate a deployment's active revision; the run's job goes to the evals queue. 202: Location is the
        job (GET it with ?wait=N), the body the run."""
        data = EvalRunCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            run = eval_run_create(deployment=data.validated_data["deployment"], user=request.user,
                                  settings=data.validated_data["settings"])
        except BadRunSettings as exc:
            raise bad_settings(exc) from None
        return self._started(run)

    @extend_schema(request=None, responses={202: EvalRunDetailSerializer, 409: NOT_NOW})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None, format=None):
        """A pending run ends at once; a running one stops at the runner's next heartbeat."""
        try:
            run = eval_cancel(run=self.get_object(), user=request.user)
        except EvalStateError as exc:
            raise Conflict(str(exc)) from None
        return self._detail(run, status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: EvalRunDetailSerializer, 409: NOT_NOW})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None, format=None):
        """A failed or canceled run goes on in a new job, sending only the requests AISBench's cache lacks."""
        try:
            run = eval_resume(run=self.get_object(), user=request.user)
        except EvalStateError as exc:
            raise Conflict(str(exc)) from None
        return self._started(run)

    @extend_schema(parameters=[OpenApiParameter("correct", bool, description="false: only the wrong (and failed) "
                                                                             "answers; true: only the right ones")],
                   responses={200: EvalSampleSerializer(many=True)})
    @action(detail=True, methods=["get"], filter_backends=[])
    def samples(self, request, pk=None, format=None):
        run = self.get_object()
        correct = request.query_params.get("correct")
        if correct not in (None, "true", "false"):
            raise ValidationError({"correct": ["expected true or false"]})
        samples = samples_of(run, wrong_only=correct == "false")
        if correct == "true":
            samples = samples.filter(correct=True)
        page = self.paginate_queryset(samples)
        return self.get_paginated_response(EvalSampleSerializer(page, many=True).data)


class EvalCompareView(APIView):
    @extend_schema(parameters=[OpenApiParameter("runs", str, required=True,
                                                description=f"2 to {MAX_COMPARED} run ids, comma-separated; the "
                                                            "first is the baseline")],
                   responses={200: ComparisonSerializer,
                              400: OpenApiResponse(description=f"runs is not 2 to {MAX_COMPARED} different run ids "
                                                               "(the error names runs)"),
                              404: OpenApiResponse(description="names the run ids that do not exist")})
    def get(self, request):
        """Runs side by side, a table per dataset with a column per (run, model) that has it: metrics with deltas
        and regressions against each table's first column, and the topology changes against the first run."""
        raw = [part.strip() for part in request.query_params.get("runs", "").split(",") if part.strip()]
        not_ids = [part for part in raw if not part.isdecimal()]
        if not_ids:
            raise ValidationError({"runs": [f"not run ids: {', '.join(not_ids)}"]})
        ids = [int(part) for part in raw]
        if len(set(ids)) != len(ids) or not 2 <= len(ids) <= MAX_COMPARED:
            raise ValidationError({"runs": [f"give 2 to {MAX_COMPARED} different run ids, e.g. ?runs=3,7"]})
        found = EvalRun.objects.defer("perf_requests").select_related("created_by").in_bulk(ids)
        missing = [str(i) for i in ids if i not in found]
        if missing:
            raise NotFound(f"no eval runs with ids {', '.join(missing)}")
        comparison = compare_runs([found[i] for i in ids])
        baseline = comparison.runs[0]
        changes = [{"run": change.run.pk, "baseline": baseline.pk, "problem": change.problem,
                    "changes": [{"path": path, "old": old, "new": new} for path, old, new in change.changes]}
                   for change in comparison.topology_changes]
        return Response(ComparisonSerializer({"runs": comparison.runs, "tables": comparison.tables,
                                              "rows": comparison.rows, "topology_changes": changes,
                                              "notes": comparison.notes}).data)


class EvalSweepFilterSet(django_filters.FilterSet):
    deployment = IdOrNameFilter(field_name="deployment")

    class Meta:
        model = EvalSweep
        fields = ["deployment"]


class EvalSweepViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = EvalSweep.objects.select_related("created_by")
    serializer_class = EvalSweepSerializer
    filterset_class = EvalSweepFilterSet
    write_role = Role.OPERATOR

    def get_serializer_class(self):
        return EvalSweepSerializer if self.action == "list" else EvalSweepDetailSerializer

    @extend_schema(request=EvalSweepCreateSerializer, responses={202: EvalSweepDetailSerializer, 400: BAD_SETTINGS})
    def create(self, request, *args, **kwargs):
        """Performance runs over several concurrencies, one after the other; only the first starts now. 202:
        Location is that first run's job."""
        data = EvalSweepCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            sweep = eval_sweep_create(deployment=v["deployment"], user=request.user, concurrencies=v["concurrencies"],
                                      settings=v["settings"].as_dict())
        except BadRunSettings as exc:
            raise bad_settings(exc) from None
        first = sweep.runs.filter(job__isnull=False).select_related("job").order_by("concurrency").first()
        return job_started(first.job, EvalSweepDetailSerializer(sweep).data)


class EvalDatasetViewSet(viewsets.GenericViewSet):
    serializer_class = DatasetSerializer
    parser_classes = [MultiPartParser, FormParser]
    filter_backends = []
    write_role = Role.OPERATOR

    @extend_schema(responses={200: DatasetSerializer(many=True)})
    def list(self, request, format=None):
        """The catalogue (files an operator provides below PDCP_EVALS_DIR/datasets/) and the uploaded sets."""
        page = self.paginate_queryset(dataset_choices())
        return self.get_paginated_response(DatasetSerializer(page, many=True).data)

    @extend_schema(request=DatasetUploadSerializer,
                   responses={201: DatasetSerializer,
                              400: OpenApiResponse(description="a field is invalid (each error names it); a bad line "
                                                               "is named under file, and nothing is stored")})
    def create(self, request, format=None):
        """Upload a JSONL set; every line is checked before anything is stored."""
        data = DatasetUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            dataset = eval_dataset_upload(name=v["name"], family=v["family"], description=v["description"],
                                          data=v["file"].read(MAX_UPLOAD_BYTES + 1), user=request.user)
        except BadRunSettings as exc:
            raise ValidationError(settings_errors(exc)) from None
        return Response(DatasetSerializer(dataset_choice(f"upload:{dataset.name}")).data,
                        status=status.HTTP_201_CREATED)
