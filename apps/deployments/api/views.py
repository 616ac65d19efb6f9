"""Deployments API: deployments with their revisions, plan and diff, the job-starting actions, and processes."""

from collections.abc import Mapping

import django_filters
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

import plainyaml
from apps.accounts.api_errors import BadGateway, Conflict, invalid_response
from apps.accounts.roles import Role
from apps.inventory.api.filters import IdOrNameFilter
from apps.jobs.api.responses import job_started
from apps.jobs.api.serializers import JobSerializer

from ..logs import LogUnavailable, process_log_tail
from ..models import Process, Revision
from ..revision_checks import RevisionInvalid, name_problem
from ..revision_plan import deployment_plan, plan_by_node, revision_diff
from ..runtimes import plan_start_lines
from ..selectors import deployments_with_summary
from ..services import (
    BadJobParams,
    DeploymentBusy,
    deployment_create,
    deployment_delete,
    deployment_deploy,
    deployment_preflight,
    deployment_refresh,
    deployment_restart,
    deployment_rollback,
    deployment_rolling_restart,
    deployment_stop,
    revision_activate,
    revision_create,
)
from ..topology import plan_to_text
from ..topology.plan_view import plan_view
from .serializers import (
    ActivateSerializer,
    DeploymentSerializer,
    DiffSerializer,
    JobParamsSerializer,
    PlanWithProcessesSerializer,
    ProblemsSerializer,
    ProcessLogSerializer,
    ProcessSerializer,
    RestartParamsSerializer,
    RevisionCreateSerializer,
    RevisionSerializer,
    RollingRestartParamsSerializer,
)

INVALID = OpenApiResponse(ProblemsSerializer, description="the spec does not validate: each problem names "
                                                          "instance, field and a suggested fix")
BUSY = OpenApiResponse(description="another job acts on this deployment")


def problems_response(exc: RevisionInvalid, data=None) -> Response:
    """The Error shape (apps/accounts/api_errors.py), its errors the named problems: path, instance, field (within
    the instance when there is one), message, suggestion."""
    named = [name_problem(p, data if isinstance(data, dict) else None) for p in exc.problems]
    first = named[0] if named else None
    where = (f"instance {first.instance}" + (f".{first.field}" if first.field else "") if first and first.instance
             else first.path if first else "")
    more = f" (and {len(named) - 1} more)" if len(named) > 1 else ""
    detail = f"the spec does not validate: {where}: {first.message}{more}" if first else "the spec does not validate"
    return invalid_response([p.as_dict() for p in named], detail=detail)


def _yaml_data(text):
    import yaml

    try:
        return plainyaml.load(text)
    except yaml.YAMLError:
        return None


class DeployParamsSerializer(JobParamsSerializer):
    revision = serializers.IntegerField(required=False, help_text="optional: the active revision's number, to make "
                                                                  "sure it is the one deployed (any other is a 400)")


class DeploymentFilterSet(django_filters.FilterSet):
    cluster = IdOrNameFilter(field_name="cluster")
    cluster_name = django_filters.CharFilter(field_name="cluster__name", lookup_expr="iexact")
    name = django_filters.CharFilter(lookup_expr="iexact", help_text="exact, any case (?search= for a part)")

    class Meta:
        from ..models import Deployment

        model = Deployment
        fields = ["cluster", "name"]


class DeploymentViewSet(viewsets.ModelViewSet):
    queryset = deployments_with_summary()
    serializer_class = DeploymentSerializer
    filterset_class = DeploymentFilterSet
    ordering_fields = ["name", "created", "updated"]
    search_fields = ["name", "description", "cluster__name"]
    action_query_params = {"plan": ["revision"], "diff": ["old", "new"]}
    write_role = Role.OPERATOR  # operators own topologies; deleting one is for admins
    role_for_action = {"destroy": Role.ADMIN, "preflight": Role.OPERATOR, "deploy": Role.OPERATOR,
                       "stop": Role.OPERATOR, "restart": Role.OPERATOR, "rolling_restart": Role.OPERATOR,
                       "refresh": Role.OPERATOR, "activate": Role.OPERATOR}

    @extend_schema(responses={201: DeploymentSerializer, 400: INVALID})
    def create(self, request, *args, **kwargs):
        data = DeploymentSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            deployment = deployment_create(name=v["name"], cluster=v["cluster"], description=v.get("description", ""),
                                           yaml_text=v["yaml_text"], user=request.user)
        except RevisionInvalid as exc:
            return problems_response(exc, _yaml_data(v["yaml_text"]))
        return Response(DeploymentSerializer(self.get_queryset().get(pk=deployment.pk)).data,
                        status=status.HTTP_201_CREATED)

    def perform_update(self, serializer):
        serializer.validated_data.pop("yaml_text", None)
        serializer.save()

    @extend_schema(responses={204: None, 409: BUSY})
    def destroy(self, request, *args, **kwargs):
        try:
            deployment_delete(deployment=self.get_object())
        except DeploymentBusy as exc:
            raise Conflict(str(exc)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(methods=["GET"], responses={200: RevisionSerializer(many=True)})
    @extend_schema(methods=["POST"], request=RevisionCreateSerializer, responses={201: RevisionSerializer, 400: INVALID})
    @action(detail=True, methods=["get", "post"], filterset_class=None)
    def revisions(self, request, pk=None, format=None):
        deployment = self.get_object()
        if request.method == "GET":
            page = self.paginate_queryset(Revision.objects.filter(deployment=deployment)
                                          .select_related("created_by").order_by("-number"))
            return self.get_paginated_response(RevisionSerializer(page, many=True).data)
        data = RevisionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            revision = revision_create(deployment=deployment, user=request.user, yaml_text=v.get("yaml_text"),
                                       data=v.get("spec"), comment=v["comment"], activate=v["activate"])
        except RevisionInvalid as exc:
            return problems_response(exc, v.get("spec") or _yaml_data(v.get("yaml_text") or ""))
        return Response(RevisionSerializer(revision).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ActivateSerializer, responses={200: RevisionSerializer, 202: JobSerializer, 400: INVALID,
                                                          409: BUSY})
    @action(detail=True, methods=["post"])
    def activate(self, request, pk=None, format=None):
        """Make a revision the active one; with deploy=true this is a rollback (activate, then deploy)."""
        deployment = self.get_object()
        data = ActivateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        revision = get_object_or_404(Revision, deployment=deployment, number=data.validated_data["revision"])
        try:
            if data.validated_data["deploy"]:
                return job_started(deployment_rollback(revision=revision, user=request.user))
            revision_activate(revision=revision, user=request.user)
        except RevisionInvalid as exc:
            return problems_response(exc, revision.spec)
        except DeploymentBusy as exc:
            raise Conflict(str(exc)) from None
        return Response(RevisionSerializer(revision).data)

    @extend_schema(parameters=[OpenApiParameter("revision", int, description="revision number (default: active)")],
                   responses={200: PlanWithProcessesSerializer, 400: INVALID})
    @action(detail=True, methods=["get"], filterset_class=None)
    def plan(self, request, pk=None, format=None):
        """Every command, per stage and node, that a deploy would run; nothing runs. `processes` has each as the docs
        write it (exports, one flag per line, files) next to its exact start line."""
        deployment = self.get_object()
        revision = None
        if request.query_params.get("revision"):
            number = request.query_params["revision"]
            if not number.isdecimal():
                raise ValidationError({"revision": ["expected a revision number"]})
            revision = get_object_or_404(Revision, deployment=deployment, number=int(number))
        try:
            spec, plan = deployment_plan(deployment, revision)
        except RevisionInvalid as exc:
            return problems_response(exc, (revision or deployment.active_revision or Revision(spec={})).spec)
        number = (revision or deployment.active_revision).number
        lines = plan_start_lines(plan, deployment=deployment.name, revision=number)
        processes = [{"stage": stage.name, **p.as_dict()} for stage in plan_view(plan, lines) for p in stage.processes]
        return Response({"revision": number, "profile": plan.profile, "text": plan_to_text(plan, lines),
                         "stages": plan_by_node(plan, lines), "warnings": list(plan.warnings), "processes": processes})

    @extend_schema(parameters=[OpenApiParameter("old", int, description="revision number (default: the active one)"),
                               OpenApiParameter("new", int, description="revision number (default: the newest)")],
                   responses={200: DiffSerializer})
    @action(detail=True, methods=["get"], filterset_class=None)
    def diff(self, request, pk=None, format=None):
        """What `new` changes against `old`; by default the newest revision against the active one, so
        `?new=3` alone is "revision 3 against what runs"."""
        deployment = self.get_object()
        revisions = Revision.objects.filter(deployment=deployment)
        defaults = {"old": deployment.active_revision, "new": revisions.order_by("-number").first()}
        numbers = {}
        for key in ("old", "new"):
            value = request.query_params.get(key, "")
            if value == "" and defaults[key] is not None:
                numbers[key] = defaults[key]
                continue
            if not value.isdecimal():
                raise ValidationError({key: ["expected a revision number"]})
            numbers[key] = get_object_or_404(revisions, number=int(value))
        changes = revision_diff(numbers["old"], numbers["new"])
        return Response({"old": numbers["old"].number, "new": numbers["new"].number,
                         "changes": [{"path": p, "old": a, "new": b} for p, a, b in changes]})

    @extend_schema(responses={(200, "application/yaml"): OpenApiTypes.OBJECT})  # the topology, as YAML
    @action(detail=True, methods=["get"], url_path="export", filterset_class=None)
    def export(self, request, pk=None, format=None):
        deployment = self.get_object()
        revision = deployment.active_revision
        body = revision.yaml_text if revision else ""
        return HttpResponse(body, content_type="application/yaml",
                            headers={"Content-Disposition": f'attachment; filename="{deployment.name}.yaml"'})

    def _job(self, request, starter, serializer_class=JobParamsSerializer, body=None, **fixed):
        deployment = self.get_object()
        data = serializer_class(data=request.data if body is None else body)
        data.is_valid(raise_exception=True)
        params = data.validated_data  # a JobParams (serializers.JobParamsSerializer)
        extra = {k: getattr(params, k) for k in ("instance", "role") if getattr(params, k) is not None}
        try:
            job = starter(deployment=deployment, user=request.user, params=params, **extra, **fixed)
        except RevisionInvalid as exc:
            return problems_response(exc, deployment.active_revision.spec if deployment.active_revision else None)
        except BadJobParams as exc:
            raise ValidationError({k: [v] for k, v in exc.errors.items()}) from None
        except DeploymentBusy as exc:
            raise Conflict(str(exc)) from None
        return job_started(job)

    @extend_schema(request=JobParamsSerializer, responses={202: JobSerializer, 400: INVALID, 409: BUSY})
    @action(detail=True, methods=["post"])
    def preflight(self, request, pk=None, format=None):
        return self._job(request, deployment_preflight)

    @extend_schema(request=DeployParamsSerializer, responses={202: JobSerializer, 400: INVALID, 409: BUSY})
    @action(detail=True, methods=["post"])
    def deploy(self, request, pk=None, format=None):
        """Deploys the active revision; the job's label ("<name> r<N>") and params.revision_number name it. A
        `revision` in the body must be that one: another is a 400 saying how to deploy it (activate with
        deploy=true)."""
        body = request.data
        if isinstance(body, Mapping) and "revision" in body:
            active = self.get_object().active_revision
            wanted = body["revision"]
            if active is None or str(wanted) != str(active.number):
                running = f"r{active.number}" if active else "no revision"
                raise ValidationError({"revision": [
                    f"deploy deploys the active revision ({running}), not {wanted!r}: to deploy revision {wanted}, "
                    f"POST activate/ with {{\"revision\": {wanted}, \"deploy\": true}}"]})
            body = {k: v for k, v in body.items() if k != "revision"}
        return self._job(request, deployment_deploy, body=body)

    @extend_schema(request=JobParamsSerializer, responses={202: JobSerializer, 409: BUSY})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None, format=None):
        return self._job(request, deployment_stop)

    @extend_schema(request=JobParamsSerializer, responses={202: JobSerializer, 409: BUSY})
    @action(detail=True, methods=["post"])
    def refresh(self, request, pk=None, format=None):
        """Reads the state of every recorded process back from its node (starts and stops nothing): rows become
        running with the pid found, stopped, or unknown with the reason when a node cannot be asked. Queued by
        itself when a deploy, stop or restart loses its worker."""
        return self._job(request, deployment_refresh)

    @extend_schema(request=RestartParamsSerializer, responses={202: JobSerializer, 400: INVALID, 409: BUSY})
    @action(detail=True, methods=["post"])
    def restart(self, request, pk=None, format=None):
        return self._job(request, deployment_restart, RestartParamsSerializer)

    @extend_schema(request=RollingRestartParamsSerializer, responses={202: JobSerializer, 400: INVALID, 409: BUSY})
    @action(detail=True, methods=["post"], url_path="rolling-restart")
    def rolling_restart(self, request, pk=None, format=None):
        return self._job(request, deployment_rolling_restart, RollingRestartParamsSerializer)


class RevisionFilterSet(django_filters.FilterSet):
    deployment = IdOrNameFilter(field_name="deployment")

    class Meta:
        model = Revision
        fields = ["deployment", "is_active", "number", "launch_profile"]


class RevisionViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Revision.objects.select_related("created_by").order_by("deployment_id", "-number")
    serializer_class = RevisionSerializer
    filterset_class = RevisionFilterSet


class ProcessFilterSet(django_filters.FilterSet):
    deployment = IdOrNameFilter(field_name="deployment")
    node = IdOrNameFilter(field_name="node")

    class Meta:
        model = Process
        fields = ["deployment", "node", "node_name", "role", "instance", "state", "key"]


class ProcessViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = Process.objects.select_related("deployment", "revision").order_by("deployment_id", "role", "key")
    serializer_class = ProcessSerializer
    filterset_class = ProcessFilterSet
    search_fields = ["key", "node_name", "instance"]
    action_query_params = {"log": ["lines"]}

    @extend_schema(parameters=[OpenApiParameter("lines", int, description="how many last lines (default 200)")],
                   responses={200: ProcessLogSerializer, 502: OpenApiResponse(description="the node cannot be read")})
    @action(detail=True, methods=["get"], filterset_class=None)
    def log(self, request, pk=None, format=None):
        """The last lines of the process's log, tailed over SSH now (viewers may read logs)."""
        process = self.get_object()
        lines = request.query_params.get("lines", "200")
        if not lines.isdecimal():
            raise ValidationError({"lines": ["expected a whole number"]})
        try:
            text = process_log_tail(process, lines=int(lines))
        except LogUnavailable as exc:
            raise BadGateway(str(exc)) from None
        return Response({"key": process.key, "node": process.node_name, "log_path": process.log_path, "text": text})
