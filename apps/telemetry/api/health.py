"""GET/PUT /api/deployments/<id>/health-policy/ (operators change it, viewers read it) and GET
/api/deployments/<id>/health/: every instance's and service's health state with the recent transitions."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.accounts.roles import Role
from apps.deployments.models import Deployment

from ..health.policy import (
    FIELDS,
    LIMITS,
    health_of,
    health_policy_of,
    health_policy_problems,
    health_policy_set,
)
from ..models import HealthEvent, InstanceHealth


class HealthPolicySerializer(serializers.Serializer):
    auto_restart = serializers.BooleanField(help_text="restart an unhealthy instance by itself")
    unhealthy_rounds = serializers.IntegerField(min_value=LIMITS["unhealthy_rounds"][0],
                                                max_value=LIMITS["unhealthy_rounds"][1],
                                                help_text="scrape rounds in a row unhealthy before a restart")
    backoff_s = serializers.IntegerField(min_value=LIMITS["backoff_s"][0], max_value=LIMITS["backoff_s"][1],
                                         help_text="wait after the first restart before the next; doubles each time")
    max_restarts = serializers.IntegerField(min_value=LIMITS["max_restarts"][0], max_value=LIMITS["max_restarts"][1],
                                            help_text="restarts without a healthy round in between before failed")


class InstanceHealthSerializer(serializers.ModelSerializer):
    colour = serializers.CharField(read_only=True, help_text="the state's UI colour (InstanceHealth.colour)")
    restart_job = serializers.IntegerField(source="restart_job_id", allow_null=True)

    class Meta:
        model = InstanceHealth
        fields = ["subject", "state", "colour", "reason", "since", "bad_rounds", "restarts", "last_restart_at",
                  "restart_job", "updated"]


class HealthEventSerializer(serializers.ModelSerializer):
    job = serializers.IntegerField(source="job_id", allow_null=True, help_text="the restart job it started")

    class Meta:
        model = HealthEvent
        fields = ["id", "subject", "at", "from_state", "to_state", "reason", "job"]


class DeploymentHealthSerializer(serializers.Serializer):
    policy = HealthPolicySerializer()
    states = InstanceHealthSerializer(many=True, help_text="instances by name, service processes by key")
    events = HealthEventSerializer(many=True, help_text="the most recent transitions and restarts, newest first")


def _policy_data(policy) -> dict:
    return {name: getattr(policy, name) for name in FIELDS}


class DeploymentHealthPolicyView(generics.GenericAPIView):
    queryset = Deployment.objects.all()
    serializer_class = HealthPolicySerializer
    filter_backends = []  # one deployment by id
    pagination_class = None
    write_role = Role.OPERATOR

    @extend_schema(operation_id="deployments_health_policy_retrieve", responses={200: HealthPolicySerializer})
    def get(self, request, pk=None, format=None):
        """The deployment's health policy (the defaults, auto-restart off, until one is saved)."""
        return Response(_policy_data(health_policy_of(self.get_object())))

    @extend_schema(operation_id="deployments_health_policy_update", request=HealthPolicySerializer,
                   responses={200: HealthPolicySerializer})
    def put(self, request, pk=None, format=None):
        """Changes the policy; fields left out keep their value. Takes effect from the next scrape round."""
        deployment = self.get_object()
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["expected an object with " + ", ".join(FIELDS)]})
        unknown = sorted(set(request.data) - set(FIELDS))
        problems = {name: ["unknown field; known: " + ", ".join(FIELDS)] for name in unknown}
        problems.update({k: [v] for k, v in health_policy_problems(request.data).items()})
        if problems:
            raise ValidationError(problems)
        return Response(_policy_data(health_policy_set(deployment=deployment, values=request.data)))


class DeploymentHealthView(generics.GenericAPIView):
    queryset = Deployment.objects.all()
    serializer_class = DeploymentHealthSerializer
    filter_backends = []
    pagination_class = None

    @extend_schema(operation_id="deployments_health_retrieve", responses={200: DeploymentHealthSerializer},
                   parameters=[OpenApiParameter("subject", str, description="only this instance (p0) or service "
                                                                             "process (proxy)")])
    def get(self, request, pk=None, format=None):
        """Every instance's and service process's health state (kept by the scrape rounds) and the last 50
        transitions and auto-restart decisions, newest first."""
        unknown = sorted(set(request.query_params) - {"subject", "format"})
        if unknown:
            raise ValidationError({name: ["unknown query parameter; known here: subject"] for name in unknown})
        deployment = self.get_object()
        found = health_of(deployment, subject=request.query_params.get("subject") or None)
        return Response({"policy": _policy_data(health_policy_of(deployment)),
                         "states": InstanceHealthSerializer(found["states"], many=True).data,
                         "events": HealthEventSerializer(found["events"], many=True).data})
